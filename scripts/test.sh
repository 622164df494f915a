#!/usr/bin/env bash
# The project's test command: lint, format check, then the whole test suite.
#   bash scripts/test.sh              # everything (what CI runs)
#   bash scripts/test.sh -m "not slow"   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m ruff check src tests scripts
"$PY" -m ruff format --check src tests scripts
"$PY" -m pytest "$@"
