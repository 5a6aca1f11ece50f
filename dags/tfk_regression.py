"""Regression with a side-car evaluator -> publish exactly this run's model.

- ``train`` runs the diabetes regression app
  (``airflow_tfk/runtime/examples/diabetes_app.py``) in ``parameter_server`` mode with an
  evaluator: the evaluator scores every checkpoint on held-out data (R², MAE, RMSE) into
  TensorBoard and a metrics file. The task's XCom carries the app's final metrics, the
  evaluator's last metrics and the exported model version and path; its log says the
  same in one ``training results:`` line.
- ``publish`` serves the version that ``train`` exported in this run (from its XCom),
  even when the model store holds a newer version of another run.

Params: ``steps``; ``model_version`` (0: the next free version).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_tfk.dag_env import DEFAULT_ARGS, IMAGE, NAMESPACE, STORAGE
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.operators.training import TFTrainingOperator

MODEL = "diabetes"
APP = ["python", "-m", "airflow_tfk.runtime.examples.diabetes_app"]
# one task of each role; the evaluator scores every checkpoint beside the training
ROLES = {role: {"replicas": 1} for role in ("chief", "ps", "worker", "evaluator")}

with DAG(
    dag_id="tfk_regression",
    default_args=DEFAULT_ARGS,  # backend, connection, deferrable: from the environment
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    tags=["airflow-tfk", "serving", "evaluator"],
    params={
        "steps": Param(600, type="integer", minimum=1),
        "model_version": Param(0, type="integer", minimum=0),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    train = TFTrainingOperator(
        task_id="train",
        cluster_spec={
            "image": IMAGE,
            "namespace": NAMESPACE,
            "mode": "parameter_server",
            "command": APP,
            "args": [
                "--tfk_steps",
                "{{ params.steps | string }}",
                "--tfk_checkpoint_every",
                "100",
                "--tfk_model_name",
                MODEL,
                "--tfk_model_version",
                "{{ params.model_version | string }}",
            ],
            **ROLES,
            "storage": STORAGE,
            "ps_grace_seconds": 5,
        },
        progress_interval=10,
    )
    # no version: the one `train` exported in this run (its XCom), never a newer one
    # of another run
    train >> TFPublishModelOperator(
        task_id="publish",
        model_name=MODEL,
        claim=STORAGE["models"]["claim"],
        serving={"namespace": NAMESPACE},
    )
