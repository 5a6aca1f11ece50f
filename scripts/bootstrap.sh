#!/usr/bin/env bash
# Create (or update) the project's virtual environment with exactly the versions of the
# committed lock (requirements/lock.txt; refreshed by scripts/lock.sh), then the project
# itself, editable. Idempotent and quick when nothing changed; used by quickstart.sh and
# test.sh.
#
# Environment: TFK_VENV  the venv (default .venv)
#              TFK_LOCK  another lock to install instead (scripts/newest.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TFK_VENV:-.venv}"
LOCK="${TFK_LOCK:-requirements/lock.txt}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
# The lock pins uv itself: install that one, so the sync below keeps the uv it runs with.
uv_pin=$(grep -oE '^uv==[^ ]+' "$LOCK")
if ! [ -x "$VENV/bin/uv" ] || [ "$("$VENV/bin/uv" --version | cut -d' ' -f2)" != "${uv_pin#uv==}" ]; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$uv_pin"
fi
# uv installs Airflow + TensorFlow in seconds where pip takes minutes. `sync` makes the venv
# exactly the lock: a package the lock dropped goes too, so two fresh venvs are identical.
# --compile-bytecode: every test and task process imports Airflow; without .pyc files
# (e.g. under PYTHONDONTWRITEBYTECODE) each one recompiles it (measured: 2.7 s -> 1.6 s).
export VIRTUAL_ENV="$VENV"
"$VENV/bin/uv" pip sync --quiet --compile-bytecode --require-hashes "$LOCK"
# The project itself, with no dependency of its own left to resolve: all are in the lock.
"$VENV/bin/uv" pip install --quiet --compile-bytecode --no-deps \
  --build-constraints requirements/build-lock.txt -e .
