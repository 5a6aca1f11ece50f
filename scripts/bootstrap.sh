#!/usr/bin/env bash
# Create (or update) the project's virtual environment with everything it needs.
# Idempotent and quick when nothing changed; used by quickstart.sh and test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TFK_VENV:-.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if [ ! -x "$VENV/bin/uv" ]; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv>=0.4"
fi
# uv resolves and installs Airflow + TensorFlow in seconds where pip takes minutes.
# --compile-bytecode: every test and task process imports Airflow; without .pyc files
# (e.g. under PYTHONDONTWRITEBYTECODE) each one recompiles it (measured: 2.7 s -> 1.6 s).
VIRTUAL_ENV="$VENV" "$VENV/bin/uv" pip install --quiet --compile-bytecode -e ".[test,local,validate]"
