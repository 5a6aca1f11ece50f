"""Sweep -> quality gate -> publish: the best of a hyperparameter sweep goes to TF Serving.

- ``sweep`` runs ``trials`` distributed trainings of the digits app (``all_reduce`` on 2
  workers), at most ``max_concurrent_trials`` at once; Optuna's TPE sampler chooses the
  learning rate and hidden width, its median pruner stops a trial whose loss is behind
  the finished ones (its cluster is deleted at once; it is recorded PRUNED, never
  published). The table of trials is in the task log and in XCom (``trials``); the best
  trial's parameters, held-out accuracy and model version are in ``best``.
- ``publish`` publishes the best trial's version (the sweep's XCom ``export``) only if its
  held-out accuracy passes the quality gate; the previous version keeps serving otherwise.

The study is kept in an SQLite file under the sweep root: the platform's
``[tfk] sweep_root``, else the local backend's ``<root>/.sweeps/``; on Kubernetes the
platform sets that root on a volume every Airflow worker mounts, or ``TFK_SWEEP_STORAGE``
names a database URL it allows (``[tfk] sweep_storage_url_prefixes``), so a retry of
``sweep`` resumes the study without running its finished trials again. On Kubernetes, give the spec a
``queue_name`` (a Kueue LocalQueue) too, so that sweeps share the cluster fairly.
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Param

from airflow_tfk.dag_env import (
    BACKEND,
    DIGITS_APP,
    IMAGE,
    KUBERNETES_CONN_ID,
    NAMESPACE,
    PROXY_POLICY,
    STORAGE,
)
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator

MODEL = "digits_sweep"

with DAG(
    dag_id="tfk_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    tags=["airflow-tfk", "sweep", "serving"],
    params={
        "trials": Param(6, type="integer", minimum=1, maximum=200),
        "max_concurrent_trials": Param(2, type="integer", minimum=1, maximum=32),
        "steps": Param(400, type="integer", minimum=10, maximum=100_000),
        "min_accuracy": Param(0.85, type="number", minimum=0, maximum=1),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    sweep = TFHyperparameterSweepOperator(
        task_id="sweep",
        backend=BACKEND,
        kubernetes_conn_id=KUBERNETES_CONN_ID,
        cluster_spec={
            "image": IMAGE,
            "namespace": NAMESPACE,
            "mode": "all_reduce",
            "command": DIGITS_APP,
            "args": [
                "--tfk_steps",
                "{{ params.steps | string }}",
                "--tfk_model_name",
                MODEL,
                "--tfk_checkpoint_every",
                "0",
                "--tfk_progress_every",
                "10",
            ],  # fmt: skip
            "worker": {"replicas": 2},
            "storage": STORAGE,
            "ps_grace_seconds": 0,
            "max_duration_seconds": 1800,
        },
        sweep={
            "n_trials": "{{ params.trials }}",
            "max_concurrent_trials": "{{ params.max_concurrent_trials }}",
            "search_space": {
                "tfk_learning_rate": {"type": "float", "low": 1e-4, "high": 0.3, "log": True},
                "hidden": {"type": "int", "low": 8, "high": 128, "log": True},
            },
            "objective": "accuracy",
            "direction": "maximize",
            "sampler": {"name": "tpe", "seed": 0},
            "pruner": {"name": "median", "n_startup_trials": 2, "n_warmup_steps": 50},
            "storage": os.environ.get("TFK_SWEEP_STORAGE"),
        },
    )
    publish = TFPublishModelOperator(
        task_id="publish",
        backend=BACKEND,
        kubernetes_conn_id=KUBERNETES_CONN_ID,
        model_name=MODEL,
        claim=STORAGE["models"]["claim"],
        serving={"namespace": NAMESPACE, **PROXY_POLICY},
        quality_gate={"thresholds": {"accuracy": "{{ params.min_accuracy }}"}},
    )
    sweep >> publish
