#!/usr/bin/env bash
# The one prepared GPU call: everything a lent GPU machine (one H100/H200, no
# network, its own torch) measures, in one command of at most 9 minutes.
#
#   bash .dev_scripts/gpu_check.sh OUT pack   # here, with network: into .carry/ (git-ignored;
#                                             # HPM_CARRY moves it) the overlay wheelhouse for
#                                             # Python 3.12 and the gzipped Fashion-MNIST
#   bash .dev_scripts/gpu_check.sh OUT all    # there, offline, carrying .carry
#
# `all` keeps a deadline (HPM_GPU_DEADLINE, default 520 s) and gives each part what is
# left: the overlay install; `pytest -m cuda`; the main job on CUDA (--amp); then
# .dev_scripts/bench_step.py: ViT-B/16 224 px, batch 256 and 64, bf16 and fp16, MAE /
# faithful HPM / the fast setting, default vs fused AdamW, syncs and operator calls;
# ViT-L bf16 b64 with sections; the compiled rows. Each file straight into OUT (at most 8
# come back): all.log, cuda_tests.xml, main_job.json, pace_b.json, pace_l.json,
# pace_compile.json. HPM_GPU_TINY=1 runs it at toy sizes on whatever device there is (the
# CPU dry run; HPM_GPU_INSTALL=0 skips the install); HPM_PYTHON picks the Python.
# docs/gpu.md says more.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${1:-}
[[ -n $OUT && $# -eq 2 && ( $2 == all || $2 == pack ) ]] \
  || { echo "usage: bash .dev_scripts/gpu_check.sh OUT pack|all" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${HPM_PYTHON:-$(command -v python3 || command -v python)}
export HPM_PYTHON=$PY  # install.sh overlay installs into this one
export PYTHONUNBUFFERED=1
CARRY=${HPM_CARRY:-$ROOT/.carry}
log() { printf '[gpu_check] %s\n' "$*"; }

if [[ $2 == pack ]]; then
  bash .dev_scripts/build_wheelhouse.sh "$CARRY/whl" --overlay --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    && mkdir -p "$CARRY/fashion-mnist" \
    && cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$CARRY/fashion-mnist/" \
    && du -sh "$CARRY"
  exit
fi

DEADLINE=$(( $(date +%s) + ${HPM_GPU_DEADLINE:-520} ))
left() { echo $(( DEADLINE - $(date +%s) )); }
exec > >(tee "$OUT/all.log") 2>&1
B=(.dev_scripts/bench_step.py --count-ops)
if [[ ${HPM_GPU_TINY:-0} == 1 ]]; then
  SIZE=(--img-size 32 --iters 1 --warmup 1)
  PACE_B=(--arch t --batch 2 --precision bf16)
  PACE_L=(--arch t --batch 2 --precision bf16)
  COMPILE=(--arch t --batch 2 --precision bf16 --rows hpm)
  MAIN_OPTS=(--cfg-options train_cfg.max_epochs=1 train_dataloader.dataset.indices=512
             custom_hooks.KNNEvalHook.train_dataloader.dataset.indices=512
             custom_hooks.KNNEvalHook.val_dataloader.dataset.indices=128)
else
  SIZE=(--img-size 224 --iters 8 --warmup 2)
  PACE_B=(--arch b --batch 256 64 --precision bf16 fp16)
  PACE_L=(--arch l --batch 64 --precision bf16)
  COMPILE=(--arch b --batch 256 --precision bf16 --rows mae hpm fast)
  MAIN_OPTS=()
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
timeout $(( $(left) / 5 )) "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/test_models tests/test_engine \
  tests/test_evaluation --junitxml "$OUT/cuda_tests.xml"
log "main job on CUDA ($(left) s left)"
start=$(date +%s)
rm -rf work_dirs/gpu_main_job
timeout $(( $(left) / 4 )) "$PY" tools/train.py configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py \
  --work-dir work_dirs/gpu_main_job --quiet --amp "${MAIN_OPTS[@]}"
"$PY" .dev_scripts/bench_step.py --collect-run work_dirs/gpu_main_job "$(( $(date +%s) - start ))" \
  --out "$OUT/main_job.json"
log "pace ViT-B ($(left) s left)"
"$PY" "${B[@]}" "${SIZE[@]}" "${PACE_B[@]}" --optimizer default fused --rows mae hpm fast \
  --budget $(( $(left) * 45 / 100 )) --out "$OUT/pace_b.json"
log "pace ViT-L ($(left) s left)"
"$PY" "${B[@]}" "${SIZE[@]}" "${PACE_L[@]}" --optimizer fused --rows mae hpm 2blocks fast --sections \
  --budget $(( $(left) / 4 )) --out "$OUT/pace_l.json"
log "compile ($(left) s left)"
timeout $(( $(left) - 10 )) "$PY" "${B[@]}" "${SIZE[@]}" "${COMPILE[@]}" --optimizer fused --compile \
  --budget $(( $(left) / 2 )) --out "$OUT/pace_compile.json"
log "done ($(left) s left)"
