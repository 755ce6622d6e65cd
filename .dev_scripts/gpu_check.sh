#!/usr/bin/env bash
# The GPU checks of hpm_mm, in stages that each fit in one ten-minute command
# (a lent GPU machine's limit), writing what they measure under OUT:
#
#   bash .dev_scripts/gpu_check.sh OUT STAGE...
#
# Stages:
#   pack      (here, with network) what travels to a machine without it, into .carry/
#             (git-ignored; HPM_CARRY moves it): the overlay wheelhouse for Python 3.12
#             (.carry/whl, ~4 MB) and the gzipped Fashion-MNIST (.carry/fashion-mnist, 30 MB)
#   install   the pretraining stack added to the machine's own Python (torch, numpy 2 and
#             OpenCV kept): `tools/install.sh overlay` from .carry/whl, offline; Fashion-MNIST
#             gunzipped from .carry/fashion-mnist into data/fashion_mnist
#   tests     the device-parametrised tests on CUDA (`pytest -m cuda`), then the model-level
#             and tool tests on the GPU machine as a whole (tools pick CUDA themselves)
#   amp       .dev_scripts/amp_stability.py: its config (ViT-B/16 HPM, 224 px), batch 64,
#             300 steps under fp16 (dynamic loss scale) and under bf16, Fashion-MNIST
#   bench-b   .dev_scripts/benchmark_step.py --device cuda: ViT-B/16 at 224 px,
#             batch 64 and 128, fp16 and bf16: MAE vs HPM vs the fast settings, and the mask
#             generation benchmark (batch 256)
#   bench-l   the same for ViT-L/16
#
# Each stage logs to OUT/<stage>.log; its json results go to OUT/results/ and are packed
# into OUT/<stage>.tgz at its end (a lent machine returns at most 8 files). HPM_GPU_TINY=1
# runs every stage at toy sizes on whatever device there is (the CPU dry run); HPM_PYTHON
# picks the Python (default: python3 on PATH). docs/gpu.md says more.
#
# On a lent H100/H200 (Python 3.12, its own torch 2.11 + CUDA, numpy 2, no network), after
# `bash .dev_scripts/gpu_check.sh /tmp/pack pack` here, each command carrying .carry:
#   bash .dev_scripts/gpu_check.sh $OUT install tests
#   bash .dev_scripts/gpu_check.sh $OUT install amp bench-b
#   bash .dev_scripts/gpu_check.sh $OUT install bench-l
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${1:-}
[[ -n $OUT && $# -ge 2 ]] || { echo "usage: bash .dev_scripts/gpu_check.sh OUT STAGE... (pack install tests amp bench-b bench-l)" >&2; exit 2; }
shift
mkdir -p "$OUT/results"
OUT=$(cd "$OUT" && pwd)
PY=${HPM_PYTHON:-$(command -v python3 || command -v python)}
export HPM_PYTHON=$PY  # install.sh overlay installs into this one
export PYTHONUNBUFFERED=1
TINY=${HPM_GPU_TINY:-0}
CARRY=${HPM_CARRY:-$ROOT/.carry}
log() { printf '[gpu_check] %s\n' "$*"; }

# sizes: the GPU's, or toys for the dry run
if [[ $TINY == 1 ]]; then
  AMP_ARGS=(.dev_scripts/configs/amp-stability_hpm-vit-tiny_fmnist-64px.py --batch 2 --steps 10 --amp bf16)
  BENCH_ARGS=(--img-size 32 --iters 1 --warmup 1 --fast teacher_half_res)
  BATCHES=(2) AMPS=(bf16) MASK_BATCH=16 ARCH_B=t ARCH_L=t
else
  AMP_ARGS=(--batch 64 --steps 300 --amp fp16 bf16)
  BENCH_ARGS=(--img-size 224 --iters 10 --warmup 3)
  BATCHES=(64 128) AMPS=(fp16 bf16) MASK_BATCH=256 ARCH_B=b ARCH_L=l
fi

bench() {  # bench ARCH [--mask-bench]
  local arch=$1 first=1
  shift
  for batch in "${BATCHES[@]}"; do
    for amp in "${AMPS[@]}"; do
      extra=()
      [[ $first == 1 ]] && extra=("$@" --mask-batch "$MASK_BATCH")
      first=0
      log "benchmark ViT-${arch^^} batch $batch $amp"
      "$PY" .dev_scripts/benchmark_step.py --archs "$arch" --batch "$batch" --amp "$amp" \
        "${BENCH_ARGS[@]}" "${extra[@]}" --out "$OUT/results/bench_${arch}_${batch}_${amp}.json" || return 1
    done
  done
}

status=0
for stage in "$@"; do
  start=$(date +%s)
  log "stage $stage"
  case $stage in
    pack)
      bash .dev_scripts/build_wheelhouse.sh "$CARRY/whl" --overlay --python-version 3.12 \
        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        && mkdir -p "$CARRY/fashion-mnist" \
        && cp /usr/share/datasets/fashion-mnist/*-ubyte.gz "$CARRY/fashion-mnist/" \
        && du -sh "$CARRY" ;;
    install)
      HPM_WHEELHOUSE=${HPM_WHEELHOUSE:-$CARRY/whl} HPM_SKIP_DATA=1 bash tools/install.sh overlay \
        && if [[ -d $CARRY/fashion-mnist ]]; then
             "$PY" tools/dataset_converters/prepare_fashion_mnist.py --src "$CARRY/fashion-mnist" --out data/fashion_mnist
           fi ;;
    tests)
      "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
      "$PY" -m pytest -q -p no:cacheprovider -m cuda tests/test_models tests/test_engine tests/test_evaluation \
        --junitxml "$OUT/results/cuda_tests.xml"
      rc=$?
      "$PY" -m pytest -q -p no:cacheprovider -m 'not cuda' tests/test_models tests/test_engine tests/test_evaluation \
        tests/test_visualization tests/test_tools/test_train_resume.py tests/test_tools/test_train.py tests/test_tools/test_test.py \
        tests/test_dev_scripts/test_benchmark_step.py tests/test_dev_scripts/test_amp_stability.py \
        --junitxml "$OUT/results/gpu_machine_tests.xml"
      rc2=$?
      (( rc == 0 )) && rc=$rc2
      (exit $rc) ;;
    amp)
      "$PY" .dev_scripts/amp_stability.py "${AMP_ARGS[@]}" --out "$OUT/results/amp_stability.json" ;;
    bench-b)
      bench "$ARCH_B" --mask-bench ;;
    bench-l)
      bench "$ARCH_L" ;;
    *)
      log "unknown stage '$stage' (pack install tests amp bench-b bench-l)"; false ;;
  esac 2>&1 | tee "$OUT/$stage.log"
  rc=${PIPESTATUS[0]}
  log "stage $stage: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$OUT/$stage.log"
  if ls "$OUT/results/"* >/dev/null 2>&1; then
    tar -czf "$OUT/$stage.tgz" -C "$OUT/results" . && rm -rf "$OUT/results" && mkdir -p "$OUT/results"
  fi
  (( rc == 0 )) || status=$rc
  [[ $stage == install && $rc != 0 ]] && break
done
exit $status
