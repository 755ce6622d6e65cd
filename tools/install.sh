#!/usr/bin/env bash
# Set up hpm_mm on a fresh machine, idempotently, in one of two profiles.
#
#   bash tools/install.sh pretrain   # torch, mmengine, mmcv-lite, mmpretrain, hpm_mm:
#                                    # pretraining, kNN, linear/fine-tune, the pictures;
#                                    # no compiler, a few minutes (used by tools/main_job.sh)
#   bash tools/install.sh [full]     # + mmcv built with its compiled ops, mmdet,
#                                    # mmsegmentation, test tools (used by tools/run_tests.sh
#                                    # and the detection/segmentation configs)
#   bash tools/install.sh overlay    # the pretraining stack added to the active Python
#                                    # (requirements/overlay.txt, pip --no-deps): for an
#                                    # environment whose torch, numpy (1 or 2), OpenCV stay
#                                    # as they are, e.g. a GPU image without network
#
# Moving from pretrain to full in the same environment replaces mmcv-lite by
# mmcv (both ship the `mmcv` package); a full install also serves pretrain.
#
# Environment knobs:
#   HPM_VENV=path          virtual environment to create/use (default: <repo>/.venv)
#   HPM_USE_CURRENT_ENV=1  install into the active Python instead (keeps your own CUDA torch;
#                          HPM_PYTHON=path names it when `python` on PATH is another one)
#   HPM_TORCH="torch==X torchvision==Y"   torch pins used when torch is missing
#   HPM_WHEELHOUSE=dir     install offline from a wheelhouse made by .dev_scripts/build_wheelhouse.sh
#                          (pip --no-index; a full install takes mmcv from it too)
#   HPM_WHEEL_CACHE=dir    where the locally built mmcv wheel is cached
#                          (default: ~/.cache/hpm_mm/wheels); a second install reuses it
#   HPM_SKIP_DATA=1        do not prepare the embedded Fashion-MNIST data
#
# Versions: requirements/constraints.txt (pip -c). Steps: venv -> torch/torchvision ->
# mmengine -> mmcv (pretrain: mmcv-lite; full: mmcv 2.1.0 from the wheelhouse, the cache, or a
# source build with compiled ops and the C++ standard raised for new torch) ->
# mmpretrain [, mmdet, mmsegmentation] -> hpm_mm (editable) -> data/fashion_mnist.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROFILE=${1:-${HPM_PROFILE:-full}}
VENV=${HPM_VENV:-$ROOT/.venv}
WHEEL_CACHE=${HPM_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpm_mm/wheels}
WHEELHOUSE=${HPM_WHEELHOUSE:-}
TORCH_SPEC=${HPM_TORCH:-"torch==2.14.1 torchvision==0.29.1"}
MMCV_VERSION=2.1.0
REQ=$ROOT/requirements

log() { printf '[install] %s\n' "$*"; }
die() {  # the failed step's status: a killed pip is not a bad package
  local rc=$?
  if (( rc > 128 )); then
    printf '[install] ERROR: the step was killed (signal %s, %s), not refused (it was: %s). Fix: rerun bash tools/install.sh %s\n' \
      "$((rc - 128))" "$(kill -l $((rc - 128)) 2>/dev/null || echo '?')" "$*" "$PROFILE" >&2
  else
    printf '[install] ERROR: %s\n' "$*" >&2
  fi
  exit 1
}
start=$(date +%s)
case $PROFILE in
  pretrain|full|overlay) ;;
  *) die "unknown profile '$PROFILE'. Use: bash tools/install.sh pretrain   (or: full, overlay)" ;;
esac

# ---------------------------------------------------------------- python / venv
# Supported: Python 3.10-3.12 (the suite runs on 3.11; setup.py and README
# agree). 3.10 is the floor of torch 2.14 and of hpm_mm's own imports;
# mmcv 2.1 / mmdet 3.3 stop at 3.12.
supported() {
  "$1" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' 2>/dev/null \
    || die "$1 is $("$1" -V 2>&1); hpm_mm supports Python 3.10-3.12 (tested on 3.11). Fix: point HPM_PYTHON (or python3) at a Python 3.10-3.12."
}
if [[ ${HPM_USE_CURRENT_ENV:-0} == 1 || $PROFILE == overlay ]]; then
  PY=${HPM_PYTHON:-$(command -v python || command -v python3)} || die "no python on PATH"
  LOCK=$ROOT/.install.lock
else
  BASE_PY=${HPM_PYTHON:-$(command -v python3 || true)}
  [[ -n $BASE_PY ]] || die "python3 not found. Install Python 3.10-3.12 (apt-get install -y python3 python3-venv)."
  supported "$BASE_PY"
  PY=$VENV/bin/python
  LOCK=${VENV%/}.install.lock
fi
# One install at a time per environment: a second one waits for the first
# (and then finds its work done) instead of creating or filling it beside it.
exec 9>>"$LOCK"
if ! flock -n 9; then
  log "another install.sh is setting up ${BASE_PY:+$VENV}${BASE_PY:-$PY}; waiting for it to finish"
  flock 9
fi
if [[ -n ${BASE_PY:-} ]]; then
  if [[ ! -x $VENV/bin/python ]]; then
    log "creating virtual environment $VENV"
    "$BASE_PY" -m venv "$VENV" || die "could not create $VENV. Fix: apt-get install -y python3-venv (or set HPM_USE_CURRENT_ENV=1)."
  fi
  # pip runs in this venv only, never in the interpreter it was made from
  [[ $("$PY" -c 'import os, sys; print(os.path.realpath(sys.prefix))' 2>/dev/null) == "$(cd "$VENV" && pwd -P)" ]] \
    || die "$PY is not a working virtual environment in $VENV (half made?). Fix: rm -rf $VENV and rerun."
fi
supported "$PY"
PIP=("$PY" -m pip --disable-pip-version-check)
SOURCE=()  # where `pip install` looks: the index, or only the wheelhouse
if [[ -n $WHEELHOUSE ]]; then
  [[ -d $WHEELHOUSE ]] || die "HPM_WHEELHOUSE=$WHEELHOUSE is not a directory. Fix: bash .dev_scripts/build_wheelhouse.sh $WHEELHOUSE"
  WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
  SOURCE=(--no-index --find-links "$WHEELHOUSE")
  log "offline: installing from the wheelhouse $WHEELHOUSE (no package index)"
fi
INSTALL=("${PIP[@]}" install -q "${SOURCE[@]}" -c "$REQ/constraints.txt")

# Fast path: this profile (or full, which serves pretrain too) installed and importable.
stamp_src=$(cat "$ROOT/tools/install.sh" "$REQ"/*.txt "$ROOT/setup.py" 2>/dev/null | sha1sum | cut -c1-16)
PREFIX=$("$PY" -c 'import sys; print(sys.prefix)')
stamp() { echo "$PREFIX/.hpm_mm_install_$1_$stamp_src"; }
OPS_CHECK="import mmcv, mmcv.ops, torch
assert mmcv.__version__ == '$MMCV_VERSION'
mmcv.ops.nms(torch.rand(4, 4).sort(1)[0], torch.rand(4), 0.5)"
mmcv_ops_ok() { "$PY" -c "$OPS_CHECK" 2>/dev/null; }
# (pretraining needs no compiled ops: a full install serves it without the
# ops check)
# ready [CHECK]: whether hpm_mm imports and CHECK runs (if not, why, in one
# line); then the embedded data, every run: sizes and SHA-256 checked. One
# Python: each start imports the stack (~5 s).
ready() {
  "$PY" - "$ROOT" "${1:-}" <<'EOF'
import contextlib, io, os, sys
root, check = sys.argv[1:]
try:
    with contextlib.redirect_stderr(io.StringIO()):
        import hpm_mm  # noqa: F401
        exec(check)
except Exception as e:
    sys.exit(f'[install] not ready: {type(e).__name__}: {e}'.splitlines()[0])
if os.environ.get('HPM_SKIP_DATA') != '1':
    sys.path.insert(0, os.path.join(root, 'tools', 'dataset_converters'))
    from prepare_fashion_mnist import main
    try:
        main(['--out', os.path.join(root, 'data', 'fashion_mnist')])
    except (Exception, SystemExit) as e:
        print(e, file=sys.stderr)
        print('[install] WARNING: Fashion-MNIST not prepared (see above); '
              'the main job needs it, the tests do not.')
EOF
}
haves=(full)  # full serves every profile
[[ $PROFILE == full ]] || haves+=("$PROFILE")
for have in "${haves[@]}"; do
  [[ -f $(stamp "$have") ]] || continue
  [[ $have == full && $PROFILE != pretrain ]] && check=$OPS_CHECK || check=''
  if ready "$check"; then
    log "already installed ($have profile: $(stamp "$have")); $(( $(date +%s) - start )) s"
    exit 0
  fi
done
log "profile: $PROFILE"

# ---------------------------------------------------------------- overlay
if [[ $PROFILE == overlay ]]; then
  missing=$("$PY" - <<'EOF'
import importlib.util
need = dict(torch='torch', torchvision='torchvision', numpy='numpy',
            cv2='opencv-python(-headless)', matplotlib='matplotlib',
            yaml='pyyaml', rich='rich', einops='einops', PIL='Pillow',
            packaging='packaging', markdown='Markdown', click='click',
            zipp='zipp')
print(' '.join(v for k, v in need.items() if importlib.util.find_spec(k) is None))
EOF
)
  [[ -z $missing ]] || die "the overlay adds the pretraining stack to an environment that has its own packages, but $("$PY" -c 'import sys; print(sys.executable)') lacks: $missing. Fix: install those into it, or: bash tools/install.sh pretrain (a venv of its own)"
  log "adding the pretraining stack to $("$PY" -c 'import sys, torch, numpy; print(sys.executable, "(torch", torch.__version__ + ", numpy", numpy.__version__ + ")")'); nothing of it replaced"
  pins=$(mktemp)
  grep -v -E '^(setuptools|wheel)=' "$REQ/overlay.txt" > "$pins"
  "${PIP[@]}" install -q "${SOURCE[@]}" --no-deps -r "$pins" \
    || die "pip could not install the overlay${WHEELHOUSE:+ from the wheelhouse (build it with: bash .dev_scripts/build_wheelhouse.sh DIR --overlay)}"
  rm -f "$pins"
  add_pin() {  # add_pin NAME WHY: overlay.txt's pin of NAME, where the environment needs it
    local pin; pin=$(grep "^$1==" "$REQ/overlay.txt")
    log "$2: adding $pin"
    "${PIP[@]}" install -q "${SOURCE[@]}" --no-deps "$pin" || die "pip could not install $pin"
  }
  "$PY" -c "import pkg_resources" 2>/dev/null \
    || add_pin setuptools "this setuptools has no pkg_resources, which mmengine 0.10.7 imports"
  "$PY" -c "import setuptools.command.bdist_wheel" 2>/dev/null || "$PY" -c "import wheel" 2>/dev/null \
    || add_pin wheel "this setuptools ($("$PY" -c 'import setuptools; print(setuptools.__version__)')) builds hpm_mm's editable install only with the wheel package"
  # --use-pep517: pip builds the editable install with this environment's setuptools. Without
  # it, pip (no pyproject.toml, wheel present) runs `setup.py develop`, which setuptools >= 80
  # turns into a second pip with build isolation, asking an index for setuptools (offline: fails).
  "${PIP[@]}" install -q "${SOURCE[@]}" --no-deps --no-build-isolation --use-pep517 -e "$ROOT" || die "pip could not install hpm_mm itself"
  ready || die "hpm_mm does not import after the install (why: the line above; the traceback: $PY -c 'import hpm_mm')"
  touch "$(stamp overlay)"
  log "done (overlay) in $(( $(date +%s) - start )) s"
  exit 0
fi

# ---------------------------------------------------------------- torch
# one import says both versions and the tag of the python/torch pair an mmcv wheel is built for
torch_probe='import sys, torch, torchvision as v; print(torch.__version__, v.__version__, "py%d%d" % sys.version_info[:2])'
if read -r torch_version tv_version py_tag < <("$PY" -c "$torch_probe" 2>/dev/null); then
  log "keeping installed torch $torch_version torchvision $tv_version"
else
  log "installing $TORCH_SPEC"
  # shellcheck disable=SC2086
  "${INSTALL[@]}" $TORCH_SPEC "numpy<2" || die "could not install $TORCH_SPEC. Fix: set HPM_TORCH to a torch/torchvision pair pip can install here${WHEELHOUSE:+ (the wheelhouse must hold it: build it without --no-torch)}."
  read -r torch_version tv_version py_tag < <("$PY" -c "$torch_probe") || die "torch does not import after installing $TORCH_SPEC (the traceback: $PY -c 'import torch')"
fi
# mmengine first: mmcv's ops (checked below) import it
"${INSTALL[@]}" "setuptools>=77.0.3" "numpy<2" mmengine || die "pip could not install setuptools/numpy/mmengine"

# ---------------------------------------------------------------- mmcv
dist_installed() { "$PY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$1" 2>/dev/null; }
if [[ $PROFILE == pretrain ]]; then
  if "$PY" -c "import mmcv, sys; sys.exit(mmcv.__version__ != '$MMCV_VERSION')" 2>/dev/null; then
    log "keeping the installed mmcv $MMCV_VERSION"
  else
    log "installing mmcv-lite $MMCV_VERSION (pure Python: pretraining never imports mmcv.ops)"
    "${INSTALL[@]}" "mmcv-lite==$MMCV_VERSION" || die "pip could not install mmcv-lite $MMCV_VERSION"
  fi
elif mmcv_ops_ok; then
  log "mmcv $MMCV_VERSION with ops already installed"
else
  # The wheel is specific to the python and torch it was built against.
  tag=$py_tag-torch${torch_version//+/_}
  cache_dir=$WHEEL_CACHE/$tag
  wheel=$(ls "${WHEELHOUSE:-/nonexistent}/mmcv-$tag"/mmcv-$MMCV_VERSION-*.whl "$cache_dir"/mmcv-$MMCV_VERSION-*.whl 2>/dev/null | head -n1 || true)
  if [[ -z $wheel ]]; then
    [[ -z $WHEELHOUSE ]] || die "the wheelhouse has no mmcv $MMCV_VERSION wheel built for $tag. Fix: on a machine with a compiler and this python/torch, bash .dev_scripts/build_wheelhouse.sh DIR --with-mmcv"
    command -v g++ >/dev/null || die "g++ is needed to build mmcv's ops. Fix: apt-get install -y build-essential (as root), or use the pretraining profile: bash tools/install.sh pretrain"
    "$PY" -c "import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')) else 1)" \
      || die "Python headers are missing. Fix: apt-get install -y python3-dev."
    "${PIP[@]}" install -q "setuptools<70" wheel ninja packaging
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    log "building mmcv $MMCV_VERSION from source with ops, once (cached in $cache_dir): a progress line a minute; its time per CPU class: docs/install.md"
    "${PIP[@]}" download -q --no-deps --no-binary :all: --no-build-isolation "mmcv==$MMCV_VERSION" -d "$build" \
      || die "could not download the mmcv $MMCV_VERSION sdist from PyPI"
    tar -xzf "$build"/mmcv-$MMCV_VERSION.tar.gz -C "$build"
    src=$build/mmcv-$MMCV_VERSION
    # mmcv 2.1.0 hard-codes -std=c++17; torch releases whose own extension builder
    # compiles with -std=c++20 ship headers that need it, so follow torch.
    std=$("$PY" -c "import inspect, torch.utils.cpp_extension as c; print('c++20' if 'c++20' in inspect.getsource(c) else 'c++17')")
    if [[ $std == c++20 ]]; then
      log "raising mmcv's C++ standard to $std for torch $torch_version"
      sed -i 's/-std=c++17/-std=c++20/g' "$src/setup.py"
    fi
    mkdir -p "$cache_dir"
    # progress instead of pip's "still running": objects compiled of build.ninja's, once a minute
    progress() {
      local t0=$SECONDS total done_
      while sleep 60 && kill -0 $$ 2>/dev/null; do
        total=$(cat "$src"/build/temp.*/build.ninja 2>/dev/null | grep -c '^build .*\.o:' || true)
        done_=$(find "$src/build" -name '*.o' 2>/dev/null | wc -l)
        log "mmcv build: ${done_}/${total:-?} objects compiled ($(( (SECONDS - t0) / 60 )) min)"
      done
    }
    progress & watcher=$!
    blog=$build/mmcv-build.log
    (cd "$src" && MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} "${PIP[@]}" wheel --no-deps --no-build-isolation -w "$cache_dir" . >"$blog" 2>&1) \
      && built=0 || built=$?
    kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null || true
    (( built == 0 )) || { tail -n 40 "$blog" >&2; (exit "$built"); } \
      || die "mmcv build failed (the compiler's last lines above). Fix: check g++/python3-dev, or install a prebuilt mmcv for your torch/CUDA."
    wheel=$(ls "$cache_dir"/mmcv-$MMCV_VERSION-*.whl | head -n1)
    # mmcv builds with setuptools<70; torch wants >=77 and mmengine needs pkg_resources (<81).
    "${INSTALL[@]}" "setuptools>=77.0.3"
  else
    log "reusing the mmcv wheel $wheel"
  fi
  if dist_installed mmcv-lite; then
    log "replacing mmcv-lite by mmcv with compiled ops"
    "${PIP[@]}" uninstall -q -y mmcv-lite
  fi
  "${PIP[@]}" install -q --no-deps --force-reinstall "$wheel"
  "${INSTALL[@]}" addict yapf opencv-python packaging pyyaml Pillow regex
  mmcv_ops_ok || die "mmcv installed but mmcv.ops does not run. Remove $cache_dir and rerun to rebuild."
fi

# ---------------------------------------------------------------- OpenMMLab libraries + hpm_mm
if [[ $PROFILE == pretrain ]]; then
  reqs=(mmengine mmpretrain -r "$REQ/runtime.txt")
else
  reqs=(mmengine mmpretrain -r "$REQ/full.txt" -r "$REQ/runtime.txt" -r "$REQ/tests.txt")
fi
log "installing ${reqs[*]} and hpm_mm (editable)"
"${INSTALL[@]}" "${reqs[@]}" || die "pip could not install the OpenMMLab libraries${WHEELHOUSE:+ from the wheelhouse (was it built for the $PROFILE profile?)}"
"${PIP[@]}" install -q "${SOURCE[@]}" --no-deps --no-build-isolation --use-pep517 -e "$ROOT" || die "pip could not install hpm_mm itself"
ready || die "hpm_mm does not import after the install (why: the line above; the traceback: $PY -c 'import hpm_mm')"

touch "$(stamp "$PROFILE")"
log "done ($PROFILE profile) in $(( $(date +%s) - start )) s; activate with: source ${VENV}/bin/activate"
