"""Publish the version named in the run's conf, after a person approves it (HITL).

The version is a directory under the models claim; the test copies a real export there.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_tfk.operators.serving import TFPublishModelOperator

with DAG(
    dag_id="tfk_e2e_approval",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    max_active_runs=1,
    render_template_as_native_obj=True,
):
    TFPublishModelOperator(
        task_id="publish",
        backend="local",
        model_name="digits",
        claim="tfk-models",
        version="{{ dag_run.conf['version'] }}",
        serving={"namespace": "default"},
        quality_gate={"thresholds": {"accuracy": 0.5}},
        approval={"timeout_seconds": 900, "poll_seconds": 1},
    )
