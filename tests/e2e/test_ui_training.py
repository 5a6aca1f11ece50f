"""The UI-triggered DAG rejects bad parameters before anything is created: the form's
schema (Airflow's Params) catches bad values when the run is triggered, and ``validate``
catches bad combinations with an error naming the field."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e


def clusters(airflow_env) -> list:
    return list(airflow_env.local_root.glob("*/*/state.json"))


def test_bad_combination_fails_validate_naming_the_field(airflow_env) -> None:
    before = clusters(airflow_env)
    run = airflow_env.dags_test(
        "tfk_ui_training", conf=json.dumps({"mode": "all_reduce", "ps": 1}), timeout=600
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "SpecError" in out and "ps: must be omitted when mode is all_reduce" in out
    assert "running task <TaskInstance: tfk_ui_training.validate" in out
    assert "running task <TaskInstance: tfk_ui_training.train" not in out  # never started
    assert clusters(airflow_env) == before  # nothing was created


def test_bad_value_is_refused_by_the_form_schema(airflow_env) -> None:
    before = clusters(airflow_env)
    run = airflow_env.dags_test("tfk_ui_training", conf=json.dumps({"workers": -1}), timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "workers" in out and ("ParamValidationError" in out or "Invalid input" in out)
    assert clusters(airflow_env) == before
