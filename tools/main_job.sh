#!/usr/bin/env bash
# README command 1: set up (idempotent), pretrain HPM on the embedded
# Fashion-MNIST data with the small config, then evaluate the encoder with
# kNN (DINO protocol) and print the table.
#   bash tools/main_job.sh [extra tools/train.py args, e.g. --cfg-options ...]
# Env: CONFIG (default: the small Fashion-MNIST config), WORK_DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/tools/install.sh"
if [[ ${HPM_USE_CURRENT_ENV:-0} == 1 ]]; then PY=python; else PY=${HPM_VENV:-$ROOT/.venv}/bin/python; fi
CONFIG=${CONFIG:-configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py}
NAME=$(basename "$CONFIG" .py)
WORK_DIR=${WORK_DIR:-work_dirs/$NAME}
cd "$ROOT"
[[ -f data/fashion_mnist/train-images-idx3-ubyte ]] || "$PY" tools/dataset_converters/prepare_fashion_mnist.py

echo "== [1/2] HPM pretraining: $CONFIG -> $WORK_DIR"
start=$(date +%s)
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK_DIR" "$@"
echo "== pretraining took $(( $(date +%s) - start )) s"

CKPT=$(cat "$WORK_DIR/last_checkpoint")
echo "== [2/2] kNN evaluation of $CKPT (student encoder)"
"$PY" tools/analysis_tools/knn_eval.py "$CONFIG" "$CKPT" --out "$WORK_DIR/knn.json"
