#!/usr/bin/env bash
# The design gates (seconds, no network): lint with a complexity limit, the formatter,
# types, and DESIGN's import layers. Run by scripts/test.sh (so by .ci/run); alone:
#   bash scripts/gates.sh
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${TFK_VENV:-.venv}"
failed=()
gate() {
  local name=$1
  shift
  local start=$SECONDS
  if "$@"; then
    echo "gate $name: ok ($((SECONDS - start)) s)" >&2
  else
    echo "gate $name: FAILED" >&2
    failed+=("$name")
  fi
}
gate ruff "$VENV/bin/ruff" check --quiet airflow_tfk tests bench dags
gate format "$VENV/bin/ruff" format --check --quiet airflow_tfk tests bench dags
gate mypy "$VENV/bin/mypy" --no-error-summary
gate import-linter "$VENV/bin/lint-imports" --no-cache
if [ ${#failed[@]} -gt 0 ]; then
  echo "gates failed: ${failed[*]}" >&2
  exit 1
fi
