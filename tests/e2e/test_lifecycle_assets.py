"""Retrain on data, publish on a new model, through Airflow's own asset machinery.

`airflow dags test tfk_retrain_on_data` trains for real on the local backend; its success
is a model asset event whose extra carries the exported version and the metrics. Airflow
queues the DAG scheduled on that asset; one loop of the real scheduler creates its
asset-triggered run; that run's publish task publishes exactly the announced version and
emits the serving event.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, dags_test, migrated_airflow_home
from tests.openlineage_events import check_event

# Three Airflow commands and a real training: minutes on a loaded two-core machine.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2400)]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
MODEL_URI = "x-tfk-pvc://tfk-models/digits?namespace=default"
SERVING_URI = "x-tfk-serving://local/digits"

QUERY = """
import json
from sqlalchemy import select
from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
from airflow.models.dagrun import DagRun
from airflow.utils.session import create_session
with create_session() as s:
    events = [
        {"uri": s.get(AssetModel, e.asset_id).uri, "extra": e.extra, "dag": e.source_dag_id}
        for e in s.scalars(select(AssetEvent).order_by(AssetEvent.id))
    ]
    queued = [q.target_dag_id for q in s.scalars(select(AssetDagRunQueue))]
    runs = [(r.dag_id, r.run_id, str(r.run_type)) for r in s.scalars(select(DagRun))]
print(json.dumps({"events": events, "queued": queued, "runs": runs}))
"""


def _db(env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", QUERY], env=env, cwd=ROOT, text=True, capture_output=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _airflow(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIRFLOW, *args], env=env, cwd=ROOT, text=True, capture_output=True, timeout=timeout
    )


def test_model_event_triggers_the_publish_dag(tmp_path: Path) -> None:
    from airflow_tfk.serving.local import LocalServing
    from airflow_tfk.serving.spec import ServingSpec

    local_root = tmp_path / "tfk-local"
    env = migrated_airflow_home(
        tmp_path / "home",
        # The example DAGs on the local backend, chosen by name (the default is kubernetes).
        TFK_BACKEND="local",
        TFK_LOCAL_ROOT=str(local_root),
        TF_CPP_MIN_LOG_LEVEL="2",
        # A consumer DAG that is paused gets no queued run from an event.
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        # OpenLineage's file transport: one JSON event per line.
        AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
            {"type": "file", "log_file_path": str(tmp_path / "lineage.jsonl"), "append": True}
        ),
        AIRFLOW__OPENLINEAGE__NAMESPACE="tfk-e2e",
    )
    try:
        run = dags_test(env, "tfk_retrain_on_data", conf={"steps": 60}, timeout=900)
        out = run.stdout + run.stderr
        assert run.returncode == 0 and "state=success" in out, out[-6000:]

        db = _db(env)
        models = [e for e in db["events"] if e["uri"] == MODEL_URI]
        assert len(models) == 1, db["events"]
        extra = models[0]["extra"]
        exported = re.search(r"exported model digits version (\d+)", out)
        assert exported and extra["version"] == int(exported.group(1))
        assert 0.0 < extra["metrics"]["accuracy"] <= 1.0
        assert extra["run"]["dag_id"] == "tfk_retrain_on_data" and extra["run"]["task_id"] == "train"
        assert Path(extra["path"], "saved_model.pb").exists()
        assert db["queued"] == ["tfk_publish_on_model"]

        # One loop of the real scheduler turns the queued event into a run. No task may
        # leave it: with no API server here, its executor's task would wait on one, and the
        # scheduler's exit waits on its executor. A pool of no slots holds the task back.
        for slots in ("0", "128"):
            pool = _airflow(env, "pools", "set", "default_pool", slots, "default pool", timeout=120)
            assert pool.returncode == 0, pool.stderr[-3000:]
            if slots == "0":
                loop = _airflow(env, "scheduler", "-n", "1", timeout=300)
                assert loop.returncode == 0, (loop.stdout + loop.stderr)[-6000:]
        runs = [r for r in _db(env)["runs"] if r[0] == "tfk_publish_on_model"]
        assert len(runs) == 1 and "asset_triggered" in runs[0][1], runs
        published = _airflow(env, "tasks", "test", "tfk_publish_on_model", "publish", runs[0][1])
        log = published.stdout + published.stderr
        assert published.returncode == 0, log[-6000:]
        assert f"publishing version {extra['version']}, announced by the model asset event" in log

        serving = [e for e in _db(env)["events"] if e["uri"] == SERVING_URI]
        assert len(serving) == 1, _db(env)["events"]
        assert serving[0]["extra"]["version"] == extra["version"]
        assert serving[0]["extra"]["endpoint"].endswith("/v1/models/digits/labels/stable")
        assert serving[0]["extra"]["metrics"]["accuracy"] == extra["metrics"]["accuracy"]
        _check_lineage(tmp_path / "lineage.jsonl", extra["version"])
    finally:
        LocalServing(ServingSpec(model_name="digits", claim="tfk-models"), str(local_root)).delete(print)


def _check_lineage(path: Path, version: int) -> None:
    """START and COMPLETE of the training and of the publish, schema-valid, with the
    datasets, the cluster's shape and the model's version and metrics."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for event in events:
        check_event(event)
    by = {(e["job"]["name"], e["eventType"]): e for e in events}
    for job in ("tfk_retrain_on_data.train", "tfk_publish_on_model.publish"):
        assert {(job, "START"), (job, "COMPLETE")} <= set(by), sorted(by)
    train = by[("tfk_retrain_on_data.train", "COMPLETE")]
    assert [(d["namespace"], d["name"]) for d in train["inputs"]] == [
        ("x-tfk-pvc://default", "tfk-data/digits")
    ]
    cluster = train["job"]["facets"]["tfkCluster"]
    assert cluster["replicas"] == {"chief": 1, "ps": 1, "worker": 2} and cluster["mode"] == "parameter_server"
    model = train["outputs"][0]["outputFacets"]["tfkModel"]
    assert model["version"] == version and "accuracy" in model["metrics"]
    publish = by[("tfk_publish_on_model.publish", "COMPLETE")]
    assert [(d["namespace"], d["name"]) for d in publish["outputs"]] == [("x-tfk-serving://local", "digits")]
    assert publish["outputs"][0]["outputFacets"]["tfkModel"]["version"] == version
