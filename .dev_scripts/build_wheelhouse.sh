#!/usr/bin/env bash
# Build a wheelhouse: every wheel an install profile needs, for a given Python
# version and platform, so that tools/install.sh can install with no network:
#
#   bash .dev_scripts/build_wheelhouse.sh DIR [options]
#   HPM_WHEELHOUSE=DIR bash tools/install.sh pretrain     # on the offline machine
#
# Options (docs/install.md#offline-a-wheelhouse says when each is wanted):
#   --profile pretrain|full   what to collect (default pretrain; full: mmdet, mmseg, tests)
#   --python-version X.Y      target Python (default: the one running pip here)
#   --platform TAG            target platform, repeatable (default: this machine's)
#   --no-torch                without torch, torchvision and their CUDA/triton wheels
#   --with-mmcv               add the locally built mmcv with compiled ops (HPM_WHEEL_CACHE)
#   --overlay                 only requirements/overlay.txt's wheels, no dependencies (~4 MB)
#
# How: the numbered steps below (docs/install.md#offline-a-wheelhouse). Uses the
# network; the result is a plain folder to copy.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REQ=$ROOT/requirements
log() { printf '[wheelhouse] %s\n' "$*"; }
die() { printf '[wheelhouse] ERROR: %s\n' "$*" >&2; exit 1; }

OUT=${1:-}
[[ -n $OUT && $OUT != -* ]] || die "usage: bash .dev_scripts/build_wheelhouse.sh DIR [--profile pretrain|full] [--python-version X.Y] [--platform TAG]... [--no-torch] [--with-mmcv] [--overlay]"
shift
PROFILE=pretrain PYVER='' PLATFORMS=() NO_TORCH=0 WITH_MMCV=0 OVERLAY=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --profile) PROFILE=$2; shift 2 ;;
    --python-version) PYVER=$2; shift 2 ;;
    --platform) PLATFORMS+=("$2"); shift 2 ;;
    --no-torch) NO_TORCH=1; shift ;;
    --with-mmcv) WITH_MMCV=1; shift ;;
    --overlay) OVERLAY=1; shift ;;
    *) die "unknown option $1 (see the header of .dev_scripts/build_wheelhouse.sh)" ;;
  esac
done
case $PROFILE in pretrain|full) ;; *) die "--profile must be pretrain or full, not '$PROFILE'" ;; esac

VENV_PY=${HPM_VENV:-$ROOT/.venv}/bin/python
PY=$( [[ -x $VENV_PY ]] && echo "$VENV_PY" || command -v python3 )
PIP=("$PY" -m pip --disable-pip-version-check)
OUT=$(mkdir -p "$OUT" && cd "$OUT" && pwd)
TARGET=()
[[ -n $PYVER ]] && TARGET+=(--python-version "$PYVER")
for p in "${PLATFORMS[@]}"; do TARGET+=(--platform "$p"); done
CROSS=$(( ${#TARGET[@]} > 0 ))

reqs=(mmengine mmpretrain mmcv-lite "setuptools>=77.0.3" -r "$REQ/runtime.txt")
if [[ $PROFILE == full ]]; then  # serves both profiles; mmcv itself: --with-mmcv
  reqs+=(-r "$REQ/full.txt" -r "$REQ/tests.txt" wheel)
fi
if [[ $NO_TORCH == 0 ]]; then
  reqs+=(${HPM_TORCH:-torch==2.14.1 torchvision==0.29.1})
fi

# overlay: the pinned list as it is (pure-Python wheels, no resolution)
if [[ $OVERLAY == 1 ]]; then
  log "the overlay (requirements/overlay.txt)${PYVER:+ for Python $PYVER}"
  "${PIP[@]}" download --quiet --no-deps --only-binary :all: "${TARGET[@]}" -d "$OUT" -r "$REQ/overlay.txt" \
    || die "pip could not download the overlay's wheels (see above)"
  log "done: $(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1) in $OUT"
  log "install with no network: HPM_WHEELHOUSE=$OUT bash tools/install.sh overlay"
  exit 0
fi

# 1. resolve for the target, without installing anything. pip sees itself and, with
# --no-torch, this environment's torch stack (metadata) as installed: else it downloads
# ~3 GB of CUDA wheels to read their requirements. (A cross-target resolve ignores them.)
STACK='^(torch|torchvision|torchaudio|triton|nvidia-.*|cuda-.*)$'
report=$(mktemp) view=$(mktemp -d)
trap 'rm -rf "$report" "$view"' EXIT
"$PY" - "$view" "$NO_TORCH" "$STACK" <<'EOF' || die "could not list this environment's pip and torch stack (see above)"
import importlib.metadata as m, os, re, sys, pip
view, no_torch, stack = sys.argv[1], sys.argv[2] == '1', sys.argv[3]
os.symlink(os.path.dirname(pip.__file__), f'{view}/pip')
seen = set()  # the first of a name on sys.path, as an import finds it
for d in m.distributions() if no_torch else ():
    name = (d.metadata['Name'] or '').lower().replace('_', '-')
    if re.match(stack, name) and name not in seen:
        seen.add(name), os.symlink(d._path, f'{view}/{d._path.name}')
EOF
resolve=(env -C "$view" PYTHONPATH="$view" "$PY" -S -m pip --disable-pip-version-check install --dry-run --quiet --report "$report" -c "$REQ/constraints.txt")
if [[ $CROSS == 1 ]]; then
  resolve+=(--only-binary :all: --target "$(mktemp -d)" "${TARGET[@]}")
fi
log "resolving the $PROFILE profile${PYVER:+ for Python $PYVER}${PLATFORMS:+ on ${PLATFORMS[*]}}"
"${resolve[@]}" "${reqs[@]}" || die "pip could not resolve the $PROFILE profile for this target (see above)"

# 2. the resolved files (URL and sha256), minus torch and its CUDA stack with --no-torch
mapfile -t files < <("$PY" - "$report" "$NO_TORCH" "$STACK" <<'EOF'
import json, re, sys
for i in json.load(open(sys.argv[1]))['install']:
    info, name = i['download_info'], i['metadata']['name'].lower().replace('_', '-')
    if sys.argv[2] != '1' or not re.match(sys.argv[3], name):
        sha = info.get('archive_info', {}).get('hashes', {}).get('sha256')
        print(info['url'].split('#')[0] + (f'#sha256={sha}' if sha else ''))
EOF
)
log "${#files[@]} distributions"

# 3. download exactly those files: one pip, no second pass over the index (82 pages took
# ~15 s); a source-only pure-Python package is built into a wheel
get=("${PIP[@]}" download --quiet --no-deps -d "$OUT")
if [[ $CROSS == 1 ]]; then get+=(--only-binary :all: "${TARGET[@]}"); fi
"${get[@]}" "${files[@]}" || die "pip could not download the resolved files (see above)"
for sdist in "$OUT"/*.tar.gz "$OUT"/*.zip; do
  [[ -e $sdist ]] || continue
  log "no wheel on the index for $(basename "$sdist"): building one"
  "${PIP[@]}" wheel --quiet --no-deps -w "$OUT" "$sdist" && rm "$sdist" || die "could not build a wheel from $sdist"
done

# 4. the locally built mmcv with compiled ops
if [[ $WITH_MMCV == 1 ]]; then
  tag=$("$PY" -c 'import sys, torch; print("py%d%d-torch%s" % (*sys.version_info[:2], torch.__version__.replace("+", "_")))')
  cache=${HPM_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpm_mm/wheels}/$tag
  wheel=$(ls "$cache"/mmcv-2.1.0-*.whl 2>/dev/null | head -n1 || true)
  [[ -n $wheel ]] || die "no built mmcv wheel for $tag in $cache. Fix: bash tools/install.sh full (builds and caches it), then rerun"
  mkdir -p "$OUT/mmcv-$tag"
  cp "$wheel" "$OUT/mmcv-$tag/"
  log "added $(basename "$wheel") (built for $tag) in $OUT/mmcv-$tag/"
fi
log "done: $(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1) in $OUT"
log "install with no network: HPM_WHEELHOUSE=$OUT bash tools/install.sh $PROFILE"
