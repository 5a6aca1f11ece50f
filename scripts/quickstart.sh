#!/usr/bin/env bash
# The main job: a real distributed TF training (chief + PS + 2 workers as local processes)
# driven by a real `airflow dags test` of dags/tfk_quickstart.py, on SQLite.
# `airflow-tfk airflow` sets up the Airflow home (.airflow-home/) and the local backend's
# root (.tfk-local/) and prints where they are; the same command runs your own DAGs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec "${TFK_VENV:-.venv}/bin/airflow-tfk" airflow --dags-folder dags dags test tfk_quickstart "$@"
