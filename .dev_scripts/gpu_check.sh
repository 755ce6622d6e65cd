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
#   all       ONE call of at most 9 minutes (HPM_GPU_DEADLINE, default 520 s, stops each part in
#             time): install; the CUDA tests; the main job on CUDA (--amp); .dev_scripts/
#             gpu_pace.py for ViT-B/16 224 px at batch 64 and 256, fp16 and bf16, MAE / faithful
#             HPM / the fast setting, foreach vs fused AdamW and the step before #55, then the
#             ViT-L rows (bf16 b64, per-section breakdown), then the compiled rows; each file
#             straight into OUT (at most 8 come back): all.log, cuda_tests.xml, main_job.json,
#             pace_b.json, pace_l.json, pace_compile.json
#
# On a lent H100/H200 (Python 3.12, its own torch 2.11 + CUDA, numpy 2, no network), after
# `bash .dev_scripts/gpu_check.sh /tmp/pack pack` here, carrying .carry:
#   bash .dev_scripts/gpu_check.sh $OUT all
# (or stage by stage: install tests / install amp bench-b / install bench-l)
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

# ---------------------------------------------------------------- all, in one call
if [[ $1 == all ]]; then
  DEADLINE=$(( $(date +%s) + ${HPM_GPU_DEADLINE:-520} ))
  left() { echo $(( DEADLINE - $(date +%s) )); }
  exec > >(tee "$OUT/all.log") 2>&1
  rmdir "$OUT/results" 2>/dev/null
  if [[ $TINY == 1 ]]; then
    PACE_B=(--arch t --img-size 32 --batch 2 --amp bf16 --iters 1 --warmup 1)
    PACE_L=(--arch t --img-size 32 --batch 2 --amp bf16 --iters 1 --warmup 1 --rows mae
            --extra-rows t:hpm:2:bf16 t:2blocks:2:bf16 t:fast:2:bf16 --breakdown)
    COMPILE=(--arch t --img-size 32 --batch 2 --amp bf16 --iters 1 --warmup 1 --rows
             --compile-rows hpm:2:bf16)
    MAIN_OPTS=(--cfg-options train_cfg.max_epochs=1 train_dataloader.dataset.indices=512
               custom_hooks.KNNEvalHook.train_dataloader.dataset.indices=512
               custom_hooks.KNNEvalHook.val_dataloader.dataset.indices=128)
  else
    PACE_B=(--arch b --batch 256 64 --amp bf16 fp16 --iters 8 --warmup 2)
    PACE_L=(--arch l --batch 64 --amp bf16 --iters 8 --warmup 2 --rows mae
            --extra-rows l:hpm:64:bf16 l:2blocks:64:bf16 l:fast:64:bf16 --breakdown)
    COMPILE=(--arch b --batch 256 --amp bf16 --iters 8 --warmup 2 --rows
             --compile-rows hpm:256:bf16 mae:256:bf16 fast:256:bf16)
    MAIN_OPTS=()
  fi
  "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.get_device_name() if torch.cuda.is_available() else None)'
  log "install ($(left) s left)"
  if [[ ${HPM_GPU_INSTALL:-1} == 1 ]]; then  # 0: the environment has it (the CPU dry run's test)
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
  "$PY" .dev_scripts/gpu_pace.py --collect-run work_dirs/gpu_main_job "$(( $(date +%s) - start ))" \
    --out "$OUT/main_job.json"
  log "pace ViT-B ($(left) s left)"
  "$PY" .dev_scripts/gpu_pace.py "${PACE_B[@]}" --rows mae hpm fast --count-ops \
    --budget $(( $(left) * 45 / 100 )) --out "$OUT/pace_b.json"
  log "pace ViT-L ($(left) s left)"
  "$PY" .dev_scripts/gpu_pace.py "${PACE_L[@]}" --count-ops --budget $(( $(left) / 4 )) --out "$OUT/pace_l.json"
  log "compile ($(left) s left)"
  timeout $(( $(left) - 10 )) "$PY" .dev_scripts/gpu_pace.py "${COMPILE[@]}" --budget $(( $(left) / 2 )) \
    --out "$OUT/pace_compile.json"
  log "done ($(left) s left)"
  exit 0
fi

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
