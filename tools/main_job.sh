#!/usr/bin/env bash
# README command 1: set up (idempotent; the pretraining profile: no compiler),
# pretrain HPM on the embedded Fashion-MNIST data, evaluate the encoder with
# kNN (DINO protocol) after training and draw the hard-patch grids; print the
# table and the paths. Precision: --amp (precision='auto': bf16 autocast on a
# GPU with bf16, fp16 with a loss scale on one without, fp32 on a CPU): a
# console line and WORK_DIR/precision.json.
# The console shows one line per epoch; the full log is in the work dir.
#   bash tools/main_job.sh [extra tools/train.py args, e.g. --cfg-options ...]
# Env: CONFIG (default: HPM with the fast settings, half-resolution teacher
#      and 1-block loss predictor; faithful HPM is
#      configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py), WORK_DIR
#      (default: work_dirs/<config name>, or _2, _3, ... when it holds an
#      earlier run),
#      HPM_PRECISION=fp32 (fp32 whatever the hardware).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/tools/install.sh" pretrain
if [[ ${HPM_USE_CURRENT_ENV:-0} == 1 ]]; then PY=python; else PY=${HPM_VENV:-$ROOT/.venv}/bin/python; fi
CONFIG=${CONFIG:-configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py}
NAME=$(basename "$CONFIG" .py)
if [[ -z ${WORK_DIR:-} ]]; then
  # a run of its own: a work dir that holds an earlier run's checkpoints
  # is refused by the runner, so a second main job takes work_dirs/NAME_2, ...
  WORK_DIR=work_dirs/$NAME n=1
  while compgen -G "$ROOT/$WORK_DIR/epoch_*.pth" > /dev/null; do
    n=$((n + 1)); WORK_DIR=work_dirs/${NAME}_$n
  done
fi
case ${HPM_PRECISION:-amp} in
  amp) AMP=(--amp) ;;
  fp32) AMP=() ;;
  *) echo "main_job.sh: HPM_PRECISION=$HPM_PRECISION is not a precision it knows. Fix: HPM_PRECISION=amp (--amp, the default) or HPM_PRECISION=fp32." >&2; exit 2 ;;
esac
cd "$ROOT"
[[ -f data/fashion_mnist/train-images-idx3-ubyte ]] || "$PY" tools/dataset_converters/prepare_fashion_mnist.py

echo "== HPM pretraining + kNN evaluation: $CONFIG -> $WORK_DIR"
start=$(date +%s)
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK_DIR" --quiet "${AMP[@]}" "$@"
echo "== pretraining and evaluation took $(( $(date +%s) - start )) s"

"$PY" - "$WORK_DIR/knn.json" "$WORK_DIR/precision.json" "$NAME" <<'PYEOF'
import json, sys, torch
r = json.load(open(sys.argv[1]))
p = json.load(open(sys.argv[2]))
fmnist = sys.argv[3].endswith('_fmnist')  # the embedded data's configs
print(f"\n== kNN top-1 of the encoder (T={r.get('temperature', 0.07)}; "
      f"{r['num_train']} train / {r['num_val']} test images"
      f"{' of Fashion-MNIST' if fmnist else ''}; trained in "
      f"{p['precision']} on " + (f"a CPU, torch's {torch.backends.cpu.get_cpu_capability()} kernels"
      if p['device'] == 'cpu' else 'a GPU') + ")")
print('| k | top-1 (%) |\n|---|---|')
for k, v in r['acc'].items():
    print(f'| {k} | {v:.2f} |')
raw = json.load(open('docs/results/knn_raw_pixels_28px.json'))['acc'] if fmnist else {}
print(f"best: k={r['best_k']}: {r['best']:.2f}%" + (
    f"  (kNN on raw pixels, same protocol: {raw['5']:.2f}% at k=5, "
    f"{raw['10']:.2f}% at k=10: docs/results/knn_raw_pixels_28px.json)"
    if fmnist else ''))
PYEOF
echo "hard-patch grids:"
ls "$WORK_DIR"/hard_patches/epoch_*_img*.png | sed 's/^/  /'
echo "checkpoint: $(cat "$WORK_DIR/last_checkpoint")"
echo "re-evaluate: $PY tools/analysis_tools/knn_eval.py $CONFIG \$(cat $WORK_DIR/last_checkpoint) ${AMP[*]}"
