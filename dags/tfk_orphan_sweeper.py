"""Orphan sweeper: every 10 minutes, delete TF clusters whose task instance is no longer
running (its Airflow worker was SIGKILLed, the task was cleared, the DAG deleted) or that
are past their ``max_duration_seconds`` (every Job stops there by itself; this catches the
local backend's processes and an earlier version's PS StatefulSet).

Params: ``backend`` (kubernetes | local), ``namespace`` (empty: every namespace the
connection can list), ``dry_run``.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_tfk.operators.sweeper import TFSweepOrphansOperator

with DAG(
    dag_id="tfk_orphan_sweeper",
    schedule=timedelta(minutes=10),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["airflow-tfk", "maintenance"],
    params={
        "backend": Param("kubernetes", enum=["kubernetes", "local"]),
        "namespace": Param("", type="string"),
        "dry_run": Param(False, type="boolean"),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    TFSweepOrphansOperator(
        task_id="sweep",
        backend="{{ params.backend }}",
        namespace="{{ params.namespace or None }}",
        report_only="{{ params.dry_run }}",
        execution_timeout=timedelta(minutes=9),
    )
