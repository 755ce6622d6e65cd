#!/usr/bin/env bash
# README command 2: set up (idempotent; the full profile: mmcv with compiled
# ops, mmdet, mmsegmentation) and run the test suite.
#   bash tools/run_tests.sh [pytest args...]   (HPM_TEST_WORKERS: see below)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/tools/install.sh" full
if [[ ${HPM_USE_CURRENT_ENV:-0} == 1 ]]; then PY=python; else PY=${HPM_VENV:-$ROOT/.venv}/bin/python; fi
cd "$ROOT"
# one pytest-xdist worker per core (at most 4), whole files per worker; each
# worker and the tools it runs use one torch thread, and the slowest files
# go first, in tests/conftest.py's order. HPM_TEST_WORKERS=0 runs in this
# process.
WORKERS=${HPM_TEST_WORKERS:-$(n=$(nproc); echo $(( n < 4 ? n : 4 )))}
XDIST=()
(( WORKERS > 0 )) && XDIST=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder)
exec "$PY" -m pytest tests -q -p no:cacheprovider --durations=15 "${XDIST[@]}" "$@"
