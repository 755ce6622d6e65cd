#!/usr/bin/env bash
# Distributed training with torchrun (one node or many).
#   bash tools/dist_train.sh CONFIG GPUS [train.py args...]
# Multi-node: set NNODES, NODE_RANK, MASTER_ADDR (and PORT) on every node.
CONFIG=$1
GPUS=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# the project's environment (tools/install.sh) when there is one; PYTHON=...
# to choose another interpreter
VENV_PY=${HPM_VENV:-$ROOT/.venv}/bin/python
[[ -x $VENV_PY ]] || VENV_PY=python

PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec "${PYTHON:-$VENV_PY}" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" \
    --master_port="$PORT" \
    "$ROOT/tools/train.py" \
    "$CONFIG" \
    --launcher pytorch "${@:3}"
