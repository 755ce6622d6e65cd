#!/usr/bin/env bash
# The one prepared GPU call: everything a lent GPU machine (one H100/H200, no
# network, its own torch) measures, in one command of at most 9 minutes.
#
#   bash .dev_scripts/gpu_check.sh OUT pack   # here, with network: into .carry/ (git-ignored;
#                                             # HPM_CARRY moves it) the overlay wheelhouse for
#                                             # Python 3.12, the gzipped Fashion-MNIST and
#                                             # 300 generated ImageNet-like JPEGs
#   bash .dev_scripts/gpu_check.sh OUT all    # there, offline, carrying .carry
#
# `all` keeps a deadline (HPM_GPU_DEADLINE, default 520 s) and gives each part what is
# left: the overlay install; `pytest -m cuda`; the main job's loader alone (1 and 4
# workers); the main job on CUDA (--amp, 4 workers); then
# .dev_scripts/bench_step.py, ViT-B/16 224 px bf16 fused AdamW: MAE / faithful HPM / the
# fast setting at batch 256 and 64 (syncs, operator calls); MAE under each attention
# kernel (--sdpa); JPEG decoding on the GPU against the CPU pipelines
# (.dev_scripts/pipeline_bench.py --device-decode over the carried JPEGs) and MAE's and
# the fast setting's b256 step fed by both loaders with 8 workers (--step); the main job
# with CUDA graphs (compile.mode=reduce-overhead) and the batch-64 rows with them; the
# compiled batch-256 rows. Eight files straight into OUT (at most 8 come back): all.log,
# cuda_tests.xml, main_job.json (with key main_job_graphs), pace_b.json, pace_sdpa.json,
# decode.json, pace_graphs.json, pace_compile.json. HPM_GPU_TINY=1 runs it at toy sizes
# on whatever device there is (the CPU dry run; HPM_GPU_INSTALL=0 skips the install);
# HPM_PYTHON picks the Python.
# docs/gpu.md says more.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${1:-}
[[ -n $OUT && $# -eq 2 && ( $2 == all || $2 == pack ) ]] \
  || { echo "usage: bash .dev_scripts/gpu_check.sh OUT pack|all" >&2; exit 2; }
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
exec > >(tee "$OUT/all.log") 2>&1
B=(.dev_scripts/bench_step.py --count-ops)
JPEGS=$CARRY/jpegs
if [[ ${HPM_GPU_TINY:-0} == 1 ]]; then
  SIZE=(--img-size 32 --iters 1 --warmup 1)
  PACE_B=(--arch t --batch 2 --precision bf16)
  SDPA=(--arch t --batch 2 --precision bf16 --rows mae --sdpa math efficient)
  GRAPHS=(--arch t --batch 2 --precision bf16 --rows hpm)
  COMPILE=(--arch t --batch 2 --precision bf16 --rows hpm)
  DECODE=(--images 12 --workers 1 --passes 1 --data "$OUT/../jpegs"
          --step mae fast --step-arch t --step-batch 4 --step-workers 1)
  MAIN_OPTS=(--cfg-options train_cfg.max_epochs=1 train_dataloader.dataset.indices=512
             custom_hooks.KNNEvalHook.train_dataloader.dataset.indices=512
             custom_hooks.KNNEvalHook.val_dataloader.dataset.indices=128)
  GRAPH_OPTS=(compile.backend=eager)  # the CPU dry run: no inductor build
else
  SIZE=(--img-size 224 --iters 8 --warmup 2)
  PACE_B=(--arch b --batch 256 64 --precision bf16)
  SDPA=(--arch b --batch 256 --precision bf16 --rows mae --sdpa flash efficient cudnn math)
  GRAPHS=(--arch b --batch 64 --precision bf16 --rows mae hpm fast)
  COMPILE=(--arch b --batch 256 --precision bf16 --rows mae hpm fast)
  DECODE=(--images 300 --workers 4 8 --passes 1 --data "$JPEGS"
          --step mae fast --step-batch 256 --step-workers 8)
  MAIN_OPTS=(--cfg-options train_dataloader.num_workers=4)  # one worker: ~9 s of reading
  GRAPH_OPTS=()
fi
"$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
log "install ($(left) s left)"
if [[ ${HPM_GPU_INSTALL:-1} == 1 ]]; then
  HPM_WHEELHOUSE=${HPM_WHEELHOUSE:-$CARRY/whl} HPM_SKIP_DATA=1 bash tools/install.sh overlay || exit 1
fi
if [[ -d $CARRY/fashion-mnist && ! -f data/fashion_mnist/train-images-idx3-ubyte ]]; then
  "$PY" tools/dataset_converters/prepare_fashion_mnist.py --src "$CARRY/fashion-mnist" --out data/fashion_mnist
fi
log "CUDA tests ($(left) s left)"
timeout $(( $(left) / 6 )) "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/test_models tests/test_engine \
  tests/test_evaluation tests/test_datasets --junitxml "$OUT/cuda_tests.xml"
main_job() {  # NAME [options]: the main job on CUDA; its knn.json and wall time
  local name=$1 start=$(date +%s); shift  # into main_job.json (key NAME after the first)
  rm -rf "work_dirs/gpu_$name"
  timeout $(( $(left) / 5 )) "$PY" tools/train.py configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py \
    --work-dir "work_dirs/gpu_$name" --quiet --amp "${MAIN_OPTS[@]}" "$@"
  "$PY" .dev_scripts/bench_step.py --collect-run "work_dirs/gpu_$name" "$(( $(date +%s) - start ))" \
    --out "work_dirs/gpu_$name.json"
  if [[ $name == main_job ]]; then cp "work_dirs/gpu_$name.json" "$OUT/main_job.json"
  else "$PY" -c 'import json, sys; o, n, f = sys.argv[1:]; d = json.load(open(o)); d[n] = json.load(open(f)); json.dump(d, open(o, "w"), indent=1)' \
    "$OUT/main_job.json" "$name" "work_dirs/gpu_$name.json"; fi
}
log "main job's loader, 1 and 4 workers ($(left) s left)"
timeout 60 "$PY" .dev_scripts/pipeline_bench.py --workers 1 4 \
  --own-loader configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py
log "main job on CUDA, 4 workers ($(left) s left)"
main_job main_job
log "pace ViT-B ($(left) s left)"
"$PY" "${B[@]}" "${SIZE[@]}" "${PACE_B[@]}" --optimizer fused --rows mae hpm fast \
  --budget $(( $(left) * 20 / 100 )) --out "$OUT/pace_b.json"
log "attention kernels ($(left) s left)"
"$PY" "${B[@]}" "${SIZE[@]}" "${SDPA[@]}" --optimizer fused \
  --budget $(( $(left) * 15 / 100 )) --out "$OUT/pace_sdpa.json"
log "JPEG decoding on the GPU ($(left) s left)"
timeout $(( $(left) / 4 )) "$PY" .dev_scripts/pipeline_bench.py "${DECODE[@]}" --device-decode \
  --out "$OUT/decode.json"
log "main job with CUDA graphs ($(left) s left)"
main_job main_job_graphs --cfg-options compile.mode=reduce-overhead "${GRAPH_OPTS[@]}"
log "CUDA graphs ($(left) s left)"
timeout $(( $(left) / 2 )) "$PY" "${B[@]}" "${SIZE[@]}" "${GRAPHS[@]}" --optimizer fused --compile reduce-overhead \
  --budget $(( $(left) / 3 )) --out "$OUT/pace_graphs.json"
log "compile ($(left) s left)"
timeout $(( $(left) - 10 )) "$PY" "${B[@]}" "${SIZE[@]}" "${COMPILE[@]}" --optimizer fused --compile \
  --budget $(( $(left) / 2 )) --out "$OUT/pace_compile.json"
log "done ($(left) s left)"
