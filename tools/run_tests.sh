#!/usr/bin/env bash
# README command 2: set up (idempotent; the full profile: mmcv with compiled
# ops, mmdet, mmsegmentation) and run the test suite.
#   bash tools/run_tests.sh [pytest args...]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/tools/install.sh" full
if [[ ${HPM_USE_CURRENT_ENV:-0} == 1 ]]; then PY=python; else PY=${HPM_VENV:-$ROOT/.venv}/bin/python; fi
cd "$ROOT"
exec "$PY" -m pytest tests -q -p no:cacheprovider --durations=15 "$@"
