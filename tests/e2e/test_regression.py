"""`airflow dags test tfk_regression` on the local backend: the diabetes regression app
trains in parameter_server mode with a side-car evaluator, the training task's XCom and
log carry the metrics, the evaluator's metrics and the exported version, and the publish
task serves exactly that version although the store holds another run's newer one.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import urllib.request

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

THIS_RUN, OTHER_RUN = 5, 9


def xcom(home, dag_id: str, task_id: str) -> dict:
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value' "
            "ORDER BY timestamp DESC",
            (dag_id, task_id),
        ).fetchall()
    assert rows, f"no XCom of {dag_id}.{task_id}"
    value = json.loads(rows[0][0])
    return json.loads(value) if isinstance(value, str) else value


def test_regression_publishes_its_own_version_with_evaluator_metrics(airflow_env) -> None:
    import tensorflow as tf

    from airflow_tfk.runtime.examples.diabetes_app import R2_THRESHOLD
    from airflow_tfk.serving.local import LocalServing
    from airflow_tfk.serving.spec import ServingSpec

    models = airflow_env.local_root / "default" / ".claims" / "tfk-models"
    # another run's model, with a higher version than this run will export
    other = subprocess.run(
        [
            sys.executable,
            "-m",
            "airflow_tfk.runtime.examples.diabetes_app",
            "--tfk_steps",
            "20",
            "--tfk_export_dir",
            str(models),
            "--tfk_model_version",
            str(OTHER_RUN),
        ],
        env={k: v for k, v in airflow_env.env.items() if not k.startswith("TFK_") and k != "TF_CONFIG"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert other.returncode == 0, other.stderr[-3000:]
    run = airflow_env.dags_test(
        "tfk_regression", conf=json.dumps({"steps": 400, "model_version": THIS_RUN}), timeout=900
    )
    out = run.stdout + run.stderr
    try:
        assert run.returncode == 0, out[-6000:]
        assert "state=success" in out
        # the training task: one summary line and the same in XCom
        summary = re.search(r"training results: .*", out)
        assert summary, out[-4000:]
        assert f"exported model diabetes version {THIS_RUN}" in summary.group(0)
        assert "evaluator at step 400" in summary.group(0)
        train = xcom(airflow_env.home, "tfk_regression", "train")
        assert train["outcome"] == "succeeded"
        assert train["metrics"]["r2"] >= R2_THRESHOLD, train["metrics"]
        assert train["eval_metrics"]["step"] == 400 and "rmse" in train["eval_metrics"]
        assert train["model_version"] == THIS_RUN
        assert train["model_path"] == str(models / "diabetes" / str(THIS_RUN))
        # the evaluator's scalars in TensorBoard's event files, under the logs claim
        logs = airflow_env.local_root / "default" / ".claims" / "tfk-logs"
        files = list(logs.glob(f"{train['name']}/evaluator-0/events.out.tfevents.*"))
        assert files, sorted(str(p) for p in logs.rglob("*"))[:20]
        tags = {
            v.tag for f in files for e in tf.compat.v1.train.summary_iterator(str(f)) for v in e.summary.value
        }
        assert {"eval/r2", "eval/mae", "eval/rmse"} <= tags
        # publish served this run's version, not the newer one of the other run
        assert f"publishing version {THIS_RUN}, exported by train" in out
        published = xcom(airflow_env.home, "tfk_regression", "publish")
        assert published["version"] == THIS_RUN, published
        url = re.search(r"(http://127\.0\.0\.1:\d+/v1/models/diabetes/labels/stable)", out)
        assert url, out[-4000:]
        with urllib.request.urlopen(url.group(1), timeout=30) as resp:
            status = json.load(resp)
        assert [(v["version"], v["state"]) for v in status["model_version_status"]] == [
            (str(THIS_RUN), "AVAILABLE")
        ]
    finally:
        LocalServing(
            ServingSpec(model_name="diabetes", claim="tfk-models"), str(airflow_env.local_root)
        ).delete(print)
