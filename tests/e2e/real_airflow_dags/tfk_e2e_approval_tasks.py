"""Publish the version named in the run's conf after a person's approval, as tasks:
stage >> approve (Airflow's ApprovalOperator) >> promote, withdraw as the stage's
teardown (airflow_tfk.operators.approval_flow). ``tfk_e2e_approval_timeout`` is the same
with a 15 s answer time, for Airflow's own timeout. The versions are directories under
the models claim that the test writes."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_tfk.operators.approval_flow import publish_with_approval

for dag_id, timeout in (("tfk_e2e_approval_tasks", 900), ("tfk_e2e_approval_timeout", 15)):
    with DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        max_active_runs=1,
    ):
        publish_with_approval(
            "publish",
            model_name="digits",
            backend="local",
            claim="tfk-models",
            version="{{ dag_run.conf['version'] }}",
            serving={"namespace": "default"},
            quality_gate={"thresholds": {"accuracy": 0.5}},
            timeout_seconds=timeout,
        )
