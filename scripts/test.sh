#!/usr/bin/env bash
# The whole test suite: sets up its own environment, checks the design gates
# (scripts/gates.sh: ruff, formatter, mypy, import-linter), then runs pytest.
# Arguments go to pytest. A failed gate still runs the tests, then fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
gates=0
bash scripts/gates.sh || gates=$?
status=0
"${TFK_VENV:-.venv}/bin/python" -m pytest "$@" || status=$?
if [ "$status" -eq 0 ] && [ "$gates" -ne 0 ]; then
  status=$gates
fi
exit "$status"
