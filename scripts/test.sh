#!/usr/bin/env bash
# The whole test suite: sets up its own environment, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec "${TFK_VENV:-.venv}/bin/python" -m pytest "$@"
