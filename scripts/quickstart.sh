#!/usr/bin/env bash
# The main job: a real distributed TF training (chief + PS + 2 workers as local processes)
# driven by a real `airflow dags test` of dags/tfk_quickstart.py, on SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
source scripts/airflow-env.sh
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
mkdir -p "$AIRFLOW_HOME"
airflow db migrate > "$AIRFLOW_HOME/db-migrate.log" 2>&1 || { cat "$AIRFLOW_HOME/db-migrate.log"; exit 1; }
exec airflow dags test tfk_quickstart "$@"
