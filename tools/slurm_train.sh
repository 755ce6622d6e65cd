#!/usr/bin/env bash
# Train on a Slurm cluster (one task per GPU), mmpretrain's convention.
#   [GPUS=16] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS=...] \
#   bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py args]
set -x
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
PY_ARGS=("${@:5}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# the project's environment (tools/install.sh) when there is one; PYTHON=...
# to choose another interpreter
VENV_PY=${HPM_VENV:-$ROOT/.venv}/bin/python
[[ -x $VENV_PY ]] || VENV_PY=python

# SRUN_ARGS stays unquoted: it holds several srun options
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
srun -p "${PARTITION}" \
    --job-name="${JOB_NAME}" \
    --gres=gpu:"${GPUS_PER_NODE}" \
    --ntasks="${GPUS}" \
    --ntasks-per-node="${GPUS_PER_NODE}" \
    --cpus-per-task="${CPUS_PER_TASK}" \
    --kill-on-bad-exit=1 \
    ${SRUN_ARGS} \
    "${PYTHON:-$VENV_PY}" -u "$ROOT/tools/train.py" "${CONFIG}" \
    --work-dir="${WORK_DIR}" --launcher="slurm" "${PY_ARGS[@]}"
