"""Cron-scheduled training with the two timeout-kill policies of the seeds.

- Before a run starts, an earlier run of the same training that is still alive is handled
  by ``previous_run_policy``: ``kill_previous`` (default here: its cluster is deleted and
  that run fails naming this one), ``skip`` or ``wait``.
- A run past ``max_duration_minutes`` is killed twice over: on the Airflow side by the
  task's ``execution_timeout`` (also while deferred), and on the cluster side by
  ``activeDeadlineSeconds`` (the local backend's supervisor kills it likewise), so even
  an Airflow outage cannot leave it running.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_tfk.dag_env import DEFAULT_ARGS, DIGITS_APP, IMAGE, NAMESPACE, STORAGE
from airflow_tfk.operators.training import TFTrainingOperator

MAX_DURATION_MINUTES = 60

with DAG(
    dag_id="tfk_scheduled_training",
    default_args=DEFAULT_ARGS,  # backend, connection, deferrable: from the environment
    schedule="0 */2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=2,  # lets the next run start and apply its policy to the previous one
    dagrun_timeout=timedelta(minutes=MAX_DURATION_MINUTES + 10),
    tags=["airflow-tfk", "scheduled"],
    params={
        "steps": Param(2000, type="integer", minimum=1),
        "previous_run_policy": Param("kill_previous", enum=["kill_previous", "skip", "wait", "allow"]),
        # After success, how long the parameter servers stay before they are deleted.
        "ps_grace_seconds": Param(30, type="integer", minimum=0, maximum=3600),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    TFTrainingOperator(
        task_id="train",
        previous_run_policy="{{ params.previous_run_policy }}",
        execution_timeout=timedelta(minutes=MAX_DURATION_MINUTES),
        cluster_spec={
            "image": IMAGE,
            "namespace": NAMESPACE,
            "mode": "parameter_server",
            "command": DIGITS_APP,
            "args": ["--tfk_steps", "{{ params.steps | string }}"],
            "chief": {"replicas": 1},
            "ps": {"replicas": 1},
            "worker": {"replicas": 2},
            "storage": STORAGE,
            "max_duration_seconds": MAX_DURATION_MINUTES * 60,
            "ps_grace_seconds": "{{ params.ps_grace_seconds }}",
        },
        progress_interval=10,
    )
