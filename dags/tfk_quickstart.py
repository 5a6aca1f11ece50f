"""Quickstart: a real distributed TensorFlow training on this machine (the local backend).

One chief, one parameter server and two workers train the digits classifier of
``airflow_tfk.runtime.examples.digits_app`` with TF2's ParameterServerStrategy; the
watcher logs step/total/%/ETA; after success the PS and workers are deleted (their logs
copied into the task log first); the last task answers a predict request from the
exported SavedModel through its ``serving_default`` signature.

    bash scripts/quickstart.sh      # = airflow dags test tfk_quickstart
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_tfk.operators.training import TFTrainingOperator

MODEL = "digits"

with DAG(
    dag_id="tfk_quickstart",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    tags=["airflow-tfk", "quickstart", "local"],
    params={
        "steps": Param(600, type="integer", minimum=1, maximum=100_000),
        "workers": Param(2, type="integer", minimum=1, maximum=8),
        # After success, how long the PS and workers stay before they are deleted.
        "ps_grace_seconds": Param(5, type="integer", minimum=0, maximum=3600),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    train = TFTrainingOperator(
        task_id="train",
        backend="local",
        cluster_spec={
            "image": "tensorflow/tensorflow:2.21.0",  # the local backend runs the venv's Python
            "mode": "parameter_server",
            "command": ["python", "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": ["--tfk_steps", "{{ params.steps | string }}", "--tfk_model_name", MODEL],
            "chief": {"replicas": 1},
            "ps": {"replicas": 1},
            "worker": {"replicas": "{{ params.workers }}"},
            "storage": {"logs": {"claim": "tfk-logs"}, "models": {"claim": "tfk-models"}},
            "ps_grace_seconds": "{{ params.ps_grace_seconds }}",
            "max_duration_seconds": 1800,
        },
        progress_interval=5,
    )

    @task
    def smoke_predict(cluster: dict) -> dict:
        """Answer the exported sample request through the SavedModel's serving signature."""
        import json
        import subprocess
        import sys

        from airflow_tfk.backends.local.backend import LocalBackend

        base = str(LocalBackend(**cluster["backend_config"]).claim_path(cluster["namespace"], "tfk-models"))
        out = subprocess.run(
            [sys.executable, "-m", "airflow_tfk.runtime.predict", base, MODEL],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        answer = json.loads(out.stdout.strip().splitlines()[-1])
        predictions = answer["predictions"]
        if not predictions:
            raise ValueError("the model returned no predictions")
        print(
            f"model {MODEL} at {base} answered {len(predictions)} predictions: "
            f"{json.dumps(predictions[:3])[:300]}"
        )
        return {"model_base_path": base, "predictions": len(predictions)}

    smoke_predict(train.output)
