"""Train -> publish to TensorFlow Serving -> TensorBoard, on the backend of ``TFK_BACKEND``.

- ``tensorboard`` starts TensorBoard over the shared logs claim alongside the training
  (the training task's "TensorBoard" button opens it) and keeps it running afterwards;
- ``train`` runs the distributed training (parameter_server mode) and cleans up;
- ``publish`` adds the newly exported version to TF Serving, waits until it is AVAILABLE,
  sends the app's sample request to ``:predict``, and rolls back if it does not answer.
  Its XCom holds the model name, version and endpoint.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param

from airflow_tfk.dag_env import DEFAULT_ARGS, DIGITS_APP, IMAGE, NAMESPACE, PROXY_POLICY, STORAGE
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator
from airflow_tfk.operators.training import TFTrainingOperator

MODEL = "digits"

with DAG(
    dag_id="tfk_train_publish",
    default_args=DEFAULT_ARGS,  # backend, connection, deferrable: from the environment
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    tags=["airflow-tfk", "serving", "tensorboard"],
    params={
        "steps": Param(600, type="integer", minimum=1),
        # After success, how long the PS and workers stay before they are deleted.
        "ps_grace_seconds": Param(5, type="integer", minimum=0, maximum=3600),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    tensorboard = TFStartTensorBoardOperator(
        claim=STORAGE["logs"]["claim"], tensorboard={"namespace": NAMESPACE, **PROXY_POLICY}
    )
    train = TFTrainingOperator(
        task_id="train",
        cluster_spec={
            "image": IMAGE,
            "namespace": NAMESPACE,
            "mode": "parameter_server",
            "command": DIGITS_APP,
            "args": ["--tfk_steps", "{{ params.steps | string }}", "--tfk_model_name", MODEL],
            "chief": {"replicas": 1},
            "ps": {"replicas": 1},
            "worker": {"replicas": 2},
            "storage": STORAGE,
            "ps_grace_seconds": "{{ params.ps_grace_seconds }}",
        },
        progress_interval=10,
    )
    publish = TFPublishModelOperator(
        task_id="publish",
        model_name=MODEL,
        claim=STORAGE["models"]["claim"],
        serving={"namespace": NAMESPACE, **PROXY_POLICY},
    )
    train >> publish
