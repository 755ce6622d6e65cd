#!/usr/bin/env bash
# The one prepared GPU call (docs/gpu.md#the-prepared-call: what each part measures and
# the eight files it writes into OUT):
#
#   bash .dev_scripts/gpu_check.sh OUT pack      # here, with network: .carry/ (HPM_CARRY)
#   bash .dev_scripts/gpu_check.sh OUT eager     # there, offline, carrying .carry: call 1
#   bash .dev_scripts/gpu_check.sh OUT compiled  # call 2 (`all`: both, where time allows)
#
# Each keeps a deadline (HPM_GPU_DEADLINE, default 520 s), shared among its parts.
# HPM_GPU_TINY=1: toy sizes, every part whole, no deadline (the CPU dry run);
# HPM_GPU_INSTALL=0 skips the install; HPM_PYTHON: the Python; HPM_GPU_WORK: work dirs.
#
# The next card session (15 minutes of device time hold one call of under 10 minutes
# and a short one; a machine's start and transfers take part of them; on the last
# H200, eager took about 300 s, compiled about 360 s, so `all` starves the second half):
# 1. HPM_GPU_DEADLINE=460 bash .dev_scripts/gpu_check.sh $OUT compiled (timeout 490 s,
#    carrying .carry): the compiled and the CUDA-graph rows at batch 256 (HPM faithful,
#    fast, MAE), each from a fresh compile state (never measured so: the last rows after
#    the first shared one process's block graphs), then batch 64 as the deadline allows.
# 2. At once, on the warm machine: the main job eager with 4 workers (its optimizer
#    groups and datasets changed since its record main_job/h200_01cdffc.json), and the
#    same run under cProfile for its host side by function:
#      P=python3; C=configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py
#      $P -c 'import hpm_mm' || HPM_WHEELHOUSE=$PWD/.carry/whl HPM_SKIP_DATA=1 \
#        HPM_PYTHON=$P bash tools/install.sh overlay
#      $P tools/dataset_converters/prepare_fashion_mnist.py --src .carry/fashion-mnist \
#        --out data/fashion_mnist   # where data/fashion_mnist/ is missing
#      for run in eager cprofile; do timeout 170 $P $([ $run = cprofile ] && echo \
#        -m cProfile -o $OUT/main_job.prof) tools/train.py $C --work-dir work_dirs/$run \
#        --quiet --amp --cfg-options train_dataloader.num_workers=4 > $OUT/$run.log 2>&1; done
#    then each result into a record (docs/speed.md#records) and generate_readme.py.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${1:-}
[[ -n $OUT && $# -eq 2 && $2 =~ ^(pack|all|eager|compiled)$ ]] \
  || { echo "usage: bash .dev_scripts/gpu_check.sh OUT pack|eager|compiled|all" >&2; exit 2; }
half() { [[ $2 == all || $2 == "$1" ]]; }  # half eager|compiled ARG
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
GIVEN_PY=${HPM_PYTHON:-}
PY=${GIVEN_PY:-$(command -v python3 || command -v python)}
export HPM_PYTHON=$PY  # install.sh overlay installs into this one
export PYTHONUNBUFFERED=1
CARRY=${HPM_CARRY:-$ROOT/.carry}
log() { printf '[gpu_check] %s\n' "$*"; }

if [[ $2 == pack ]]; then
  MAKER=${GIVEN_PY:-$ROOT/.venv/bin/python}  # the JPEGs need Pillow: this project's venv
  [[ -x $MAKER ]] || MAKER=$PY
  bash .dev_scripts/build_wheelhouse.sh "$CARRY/whl" --overlay --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    && mkdir -p "$CARRY/fashion-mnist" \
    && cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$CARRY/fashion-mnist/" \
    && "$MAKER" -c "import sys; sys.path.insert(0, '.dev_scripts'); import pipeline_bench as p; p.make_images('$CARRY/jpegs', 300)" \
    && du -sh "$CARRY"
  exit
fi

DEADLINE=$(( $(date +%s) + ${HPM_GPU_DEADLINE:-520} ))
left() { echo $(( DEADLINE - $(date +%s) )); }
TINY=${HPM_GPU_TINY:-0}
# part SECONDS JSON CMD...: on the card, CMD under its share of the deadline; a part it
# cuts says so in all.log, in JSON ('-': none) and in CUT. The dry run (HPM_GPU_TINY=1)
# runs every part whole, so that no verdict depends on the machine's pace
part() {
  local s=$(( $1 > 1 ? $1 : 1 )) json=$2; shift 2; CUT=
  [[ $TINY == 1 ]] && { "$@"; return; }
  timeout "$s" "$@" || { local rc=$?; (( rc == 124 )) || return $rc
    CUT="after $s s, its share of the deadline"; log "cut $CUT"
    [[ $json == - ]] || note "$json" cut "\"$CUT\""; }
}
# note FILE KEY JSON: FILE's KEY set to JSON (FILE made where absent)
note() { "$PY" -S -c 'import json, os, sys; o = sys.argv[1]; d = json.load(open(o)) if os.path.exists(o) else {}; d[sys.argv[2]] = json.loads(sys.argv[3]); json.dump(d, open(o, "w"), indent=1)' "$@"; }
budget() { [[ $TINY == 1 ]] || echo --budget "$1"; }
exec > >(tee "$OUT/all.log") 2>&1
B=(.dev_scripts/bench_step.py --count-ops)
JPEGS=$CARRY/jpegs
if [[ $TINY == 1 ]]; then
  SIZE=(--img-size 32 --iters 1 --warmup 1)
  PACE_B=(--arch toy --batch 2 --precision bf16)
  SDPA=(--arch toy --batch 2 --precision bf16 --rows mae --sdpa math flash)  # the CPU has these two
  GRAPHS=(--arch toy --batch 2 --precision bf16 --rows hpm)
  COMPILE=(--arch toy --batch 2 --precision bf16 --rows hpm --compile-backend eager)
  DECODE=(--images 4 --workers 0 --passes 1 --data "$OUT/../jpegs"
          --step mae fast --step-arch toy --step-batch 2 --step-workers 0)
  LOADER=(--workers 1 --cfg-options train_dataloader.batch_size=32 train_dataloader.dataset.indices=256)
  MAIN_OPTS=(--cfg-options train_cfg.max_epochs=1 train_dataloader.dataset.indices=128
             custom_hooks.KNNEvalHook.train_dataloader.dataset.indices=64
             custom_hooks.KNNEvalHook.val_dataloader.dataset.indices=32)
else
  SIZE=(--img-size 224 --iters 8 --warmup 2)
  PACE_B=(--arch b --batch 256 64 --precision bf16)
  SDPA=(--arch b --batch 256 --precision bf16 --rows mae --sdpa flash efficient cudnn math)
  GRAPHS=(--arch b --batch 256 64 --precision bf16 --rows hpm fast mae)
  COMPILE=(--arch b --batch 256 --precision bf16 --rows hpm fast mae)
  DECODE=(--images 300 --workers 4 8 --passes 1 --data "$JPEGS"
          --step mae fast --step-batch 256 --step-workers 8)
  LOADER=(--workers 1 4)
  MAIN_OPTS=(--cfg-options train_dataloader.num_workers=4)  # one worker: ~9 s of reading
fi
GPU=$("$PY" -c 'import sys, torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, file=sys.stderr)
print(torch.cuda.get_device_name() if torch.cuda.is_available() else "")')
log "GPU: ${GPU:-none}"
log "install ($(left) s left)"
if [[ ${HPM_GPU_INSTALL:-1} == 1 ]]; then
  HPM_WHEELHOUSE=${HPM_WHEELHOUSE:-$CARRY/whl} HPM_SKIP_DATA=1 bash tools/install.sh overlay || exit 1
fi
if [[ -d $CARRY/fashion-mnist && ! -f data/fashion_mnist/train-images-idx3-ubyte ]]; then
  "$PY" tools/dataset_converters/prepare_fashion_mnist.py --src "$CARRY/fashion-mnist" --out data/fashion_mnist
fi
main_job() {  # NAME [options]: the main job on CUDA into main_job.json (key NAME after the
  local name=$1 start=$(date +%s); shift  # first): its knn.json, precision.json, wall time,
  local work=${HPM_GPU_WORK:-work_dirs}/gpu_$name  # and from its logged scalars train_s, data_share
  rm -rf "$work"
  part $(( $(left) / ${SHARE:-5} )) - "$PY" tools/train.py configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py \
    --work-dir "$work" --quiet --amp "${MAIN_OPTS[@]}" "$@"
  "$PY" -S - "$work" "$(( $(date +%s) - start ))" "$OUT/main_job.json" "$name" "$CUT" <<'EOF'
import glob, json, os.path as osp, statistics, sys
work, seconds, out, name, cut = sys.argv[1:]
record = dict(seconds=int(seconds), work_dir=work, **(dict(cut=cut) if cut else {}))
for part in ('knn', 'precision'):
    try:
        with open(osp.join(work, f'{part}.json')) as f:
            record[part] = json.load(f)
    except (OSError, ValueError) as e:
        record[part] = f'missing: {e}'
logs = sorted(glob.glob(osp.join(work, '*', 'vis_data', 'scalars.json')))
rows = [r for r in map(json.loads, open(logs[-1])) if 'time' in r] if logs else []
if rows:  # the mean iteration x iterations; the share spent waiting for data
    step = statistics.mean(r['time'] for r in rows)
    record.update(iter_s=step, train_s=step * rows[-1]['iter'],
                  data_share=statistics.mean(r['data_time'] for r in rows) / step)
print(json.dumps(record)[:800])
whole = record if name == 'main_job' else dict(
    json.load(open(out)) if osp.exists(out) else {}, **{name: record})
json.dump(whole, open(out, 'w'), indent=1)
EOF
}
if half eager "$2"; then
  log "CUDA tests ($(left) s left)"
  if [[ -n $GPU ]]; then
    part $(( $(left) / 3 )) - "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/test_models tests/test_engine \
      tests/test_evaluation tests/test_datasets --junitxml "$OUT/cuda_tests.xml"
  else  # (every case would skip: not worth a pytest start)
    printf '<testsuites><testsuite name="cuda" tests="0" skipped="1"><properties><property name="skipped" value="%s"/></properties></testsuite></testsuites>\n' \
      'no CUDA device' > "$OUT/cuda_tests.xml"
    log "CUDA tests skipped: no CUDA device"
  fi
  log "main job's loader, ${LOADER[*]} ($(left) s left)"
  part 60 - "$PY" .dev_scripts/pipeline_bench.py "${LOADER[@]}" \
    --own-loader configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py
  log "main job on CUDA, 4 workers ($(left) s left)"
  main_job main_job
  log "pace ViT-B ($(left) s left)"
  "$PY" "${B[@]}" "${SIZE[@]}" "${PACE_B[@]}" --optimizer fused --rows mae hpm fast \
    $(budget $(( $(left) * 20 / 100 ))) --out "$OUT/pace_b.json"
  log "attention kernels ($(left) s left)"
  "$PY" "${B[@]}" "${SIZE[@]}" "${SDPA[@]}" --optimizer fused \
    $(budget $(( $(left) * 15 / 100 ))) --out "$OUT/pace_sdpa.json"
  log "JPEG decoding on the GPU ($(left) s left)"
  part $(( $(left) / 4 )) "$OUT/decode.json" "$PY" .dev_scripts/pipeline_bench.py "${DECODE[@]}" \
    --device-decode --out "$OUT/decode.json"
fi
if half compiled "$2"; then  # the compiled rows, then the CUDA-graph rows (the targets;
  log "compile ($(left) s left)"  # each row compiles: 30-40 s for HPM)
  part $(( $(left) * 45 / 100 )) "$OUT/pace_compile.json" "$PY" "${B[@]}" "${SIZE[@]}" "${COMPILE[@]}" \
    --optimizer fused --compile $(budget $(( $(left) * 30 / 100 ))) --out "$OUT/pace_compile.json"
  if [[ -n $GPU ]]; then
    log "CUDA graphs ($(left) s left)"
    part $(( $(left) * 90 / 100 )) "$OUT/pace_graphs.json" "$PY" "${B[@]}" "${SIZE[@]}" "${GRAPHS[@]}" \
      --optimizer fused --compile reduce-overhead $(budget $(( $(left) * 60 / 100 ))) --out "$OUT/pace_graphs.json"
  else  # CUDA graphs replay on a GPU only (the CPU fallback: tests/test_engine/test_runner.py)
    echo '{"skipped": "CUDA graphs need a CUDA device"}' > "$OUT/pace_graphs.json"
    log "rows with CUDA graphs skipped: no CUDA device"
  fi
fi
log "done ($(left) s left)"
