"""A model's lifecycle on Airflow Assets: new data -> retrain -> new model -> publish.

- ``tfk_digits_data`` stands in for the ingestion pipeline: its task's success is an event
  of the data asset (``x-tfk-pvc://tfk-data/digits``). An event posted through Airflow's
  REST API (``POST /api/v2/assets/events``) does the same.
- ``tfk_retrain_on_data`` is scheduled on the data asset: each update retrains. The
  training declares the data as inlet and the model (``x-tfk-pvc://tfk-models/digits``)
  as outlet; its success is a model event whose extra holds the version, the metrics and
  the run.
- ``tfk_publish_on_model`` is scheduled on the model asset: it publishes exactly the
  version the event announced, behind the quality gate, and its success is a serving
  event (model, version, endpoint).

Lineage between the three shows in the Assets view; with the ``openlineage`` extra the
same inputs and outputs reach OpenLineage.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_tfk._airflow.assets import data_asset, model_asset
from airflow_tfk.dag_env import DEFAULT_ARGS, DIGITS_APP, IMAGE, NAMESPACE, PROXY_POLICY, STORAGE
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.operators.training import TFTrainingOperator

MODEL = "digits"
MODELS_CLAIM = STORAGE["models"]["claim"]
DATA = data_asset("tfk-data", "digits", namespace=NAMESPACE)
MODEL_ASSET = model_asset(MODEL, claim=MODELS_CLAIM, namespace=NAMESPACE)
START = pendulum.datetime(2026, 1, 1, tz="UTC")

with DAG(
    dag_id="tfk_digits_data",
    schedule=None,
    start_date=START,
    tags=["airflow-tfk", "lifecycle"],
    doc_md=__doc__,
):

    @task(outlets=[DATA])
    def new_digits_data() -> str:
        """Where an ingestion task would write the data; its success updates the asset."""
        return DATA.uri

    new_digits_data()

with DAG(
    dag_id="tfk_retrain_on_data",
    default_args=DEFAULT_ARGS,
    schedule=[DATA],
    start_date=START,
    tags=["airflow-tfk", "lifecycle"],
    params={"steps": Param(300, type="integer", minimum=1)},
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    TFTrainingOperator(
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
            "ps_grace_seconds": 2,
        },
        inlets=[DATA],
        outlets=[MODEL_ASSET],
        progress_interval=10,
    )

with DAG(
    dag_id="tfk_publish_on_model",
    default_args=DEFAULT_ARGS,
    schedule=[MODEL_ASSET],
    start_date=START,
    tags=["airflow-tfk", "lifecycle", "serving"],
    doc_md=__doc__,
):
    TFPublishModelOperator(
        task_id="publish",
        model_name=MODEL,
        claim=MODELS_CLAIM,
        serving={"namespace": NAMESPACE, **PROXY_POLICY},
        quality_gate={"thresholds": {"accuracy": 0.5}},
    )
