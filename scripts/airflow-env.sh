# Sourced: a self-contained Airflow home (SQLite) for the README's commands.
# Prefer `airflow-tfk airflow ...` (or `eval "$(.venv/bin/airflow-tfk env)"`), which does the
# same without sourcing. Values you already exported win: AIRFLOW_HOME, TFK_LOCAL_ROOT, TFK_BACKEND and
# your DAGs folder as AIRFLOW__CORE__DAGS_FOLDER or DAGS_FOLDER.
TFK_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$TFK_ROOT/.airflow-home}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-${DAGS_FOLDER:-$TFK_ROOT/dags}}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export AIRFLOW__CORE__UNIT_TEST_MODE=False
export AIRFLOW__LOGGING__LOGGING_LEVEL="${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}"
export TFK_LOCAL_ROOT="${TFK_LOCAL_ROOT:-$TFK_ROOT/.tfk-local}"
# The local backend, chosen by name: the provider's default is Kubernetes.
export TFK_BACKEND="${TFK_BACKEND:-local}"
export PATH="$TFK_ROOT/${TFK_VENV:-.venv}/bin:$PATH"
