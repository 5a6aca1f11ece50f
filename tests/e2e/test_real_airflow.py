"""Real Airflow on one machine: ``airflow-tfk up`` and Airflow's REST API (v2, JWT).

- A deferrable training triggered through the REST API is seen ``deferred`` with its
  trigger held by the triggerer, and succeeds. Pausing its DAG while it waits does not stop
  the training: the triggerer goes on waiting, the training ends and its parameter server
  is ended by the triggerer, and the task stays ``scheduled`` until the DAG is unpaused.
- (``TFK_REAL_AIRFLOW=1``) New data triggers the retrain and the new model the publish,
  with no trigger but the first; then one candidate is approved and one rejected through
  the HITL endpoints while a client polls the stable endpoint: the rejected version never
  answers it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import cluster_processes

from .real_airflow import ROOT, ApiError, RealAirflow, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]
HERE = Path(__file__).resolve().parent
QUICKSTART = "tfk_quickstart"


def _ti(airflow: RealAirflow, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    """The task instance, or ``{"state": None}`` before the scheduler has created it."""
    try:
        return airflow.task(dag_id, run_id, task_id)
    except ApiError as exc:
        if exc.status == 404:
            return {"state": None}
        raise


def _state(airflow: RealAirflow, dag_id: str, run_id: str, task_id: str) -> str | None:
    state = _ti(airflow, dag_id, run_id, task_id)["state"]
    return None if state is None else str(state)


def test_deferred_training_through_the_rest_api(tmp_path: Path) -> None:
    airflow = RealAirflow(
        tmp_path, [ROOT / "dags" / f"{QUICKSTART}.py"], AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="true"
    )
    airflow.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(f"{airflow.url}/api/v2/dags", timeout=60)
        assert anonymous.value.code == 401
        with pytest.raises(ApiError) as forged:
            airflow.api("GET", "/dags", token="not-a-token")
        assert forged.value.status == 403
        wait_for("the DAG to be parsed", lambda: airflow.dag_parsed(QUICKSTART), 300, airflow)
        airflow.unpause(QUICKSTART)
        run = airflow.trigger(QUICKSTART, {"steps": 200, "workers": 1, "ps_grace_seconds": 0})

        def held_by_the_triggerer() -> dict[str, Any] | None:
            ti = _ti(airflow, QUICKSTART, run, "train")
            assert ti["state"] in ("scheduled", "queued", "running", "deferred", None), ti
            trigger = ti.get("trigger") or {}
            return ti if ti["state"] == "deferred" and trigger.get("triggerer_id") else None

        ti = wait_for("train to be deferred to the triggerer", held_by_the_triggerer, 600, airflow)
        assert ti["trigger"]["classpath"] == "airflow_tfk.triggers.cluster.TFClusterDoneTrigger"
        assert cluster_processes(airflow.local_root), "the training runs while the task is deferred"

        # Paused while deferred: the triggerer keeps waiting, the training ends, and the
        # resume waits for the DAG to be unpaused.
        airflow.unpause(QUICKSTART, paused=True)
        wait_for(
            "the trigger to fire while the DAG is paused",
            lambda: _state(airflow, QUICKSTART, run, "train") != "deferred",
            600,
            airflow,
        )
        held_since = time.monotonic()
        while time.monotonic() - held_since < 20:
            assert _state(airflow, QUICKSTART, run, "train") == "scheduled"
            time.sleep(2)
        assert cluster_processes(airflow.local_root) == [], "the triggerer ended the parameter server"
        airflow.unpause(QUICKSTART)
        wait_for(
            "train to succeed after the unpause",
            lambda: _state(airflow, QUICKSTART, run, "train") == "success",
            300,
            airflow,
        )
    finally:
        airflow.stop()
    assert cluster_processes(airflow.local_root) == []


# -- the model lifecycle on the real deployment (TFK_REAL_AIRFLOW=1) ---------------------
LIFECYCLE = ("tfk_digits_data", "tfk_retrain_on_data", "tfk_publish_on_model", "tfk_e2e_approval")
MODEL_URI = "x-tfk-pvc://tfk-models/digits?namespace=default"
SERVING_URI = "x-tfk-serving://local/digits"


def _asset_triggered_run(airflow: RealAirflow, dag_id: str) -> dict[str, Any] | None:
    runs = airflow.runs(dag_id)
    assert all(r["run_type"] == "asset_triggered" for r in runs), runs
    done = [r for r in runs if r["state"] in ("success", "failed")]
    if done:
        assert done[0]["state"] == "success", (done, airflow.tail())
        return done[0]
    return None


def _events(airflow: RealAirflow, uri: str) -> list[dict[str, Any]]:
    events = airflow.api("GET", "/assets/events?order_by=timestamp&limit=100")["asset_events"]
    return [e for e in events if e["uri"] == uri]


class StablePoller(threading.Thread):
    """A client of the stable endpoint: predicts without pause and counts which version
    answered each request."""

    def __init__(self, predict_url: str, body: bytes) -> None:
        super().__init__(daemon=True)
        self.url, self.body = predict_url, body
        self.answers: list[int] = []
        self.errors = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            req = urllib.request.Request(
                self.url, data=self.body, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    self.answers.append(int(json.load(resp)["model_version"]))
            except (urllib.error.URLError, OSError, KeyError, ValueError):
                self.errors += 1
            time.sleep(0.05)

    def seen(self) -> set[int]:
        return set(self.answers)


def _answer(airflow: RealAirflow, run: str, choice: str) -> dict[str, Any]:
    dag = "tfk_e2e_approval"
    wait_for(
        f"the publish of {run} to await a person's input",
        lambda: _state(airflow, dag, run, "publish") == "awaiting_input",
        600,
        airflow,
    )
    path = f"/dags/{dag}/dagRuns/{run}/taskInstances/publish/-1/hitlDetails"
    request = airflow.api("GET", path)
    assert request["options"] == ["Approve", "Reject"] and "| accuracy |" in request["body"], request
    answered = airflow.api("PATCH", path, {"chosen_options": [choice]})
    assert answered["chosen_options"] == [choice] and answered["responded_by"]["name"] == "admin"
    return dict(request)


@pytest.mark.skipif(
    os.environ.get("TFK_REAL_AIRFLOW") != "1",
    reason="two real trainings' worth of lifecycle on four Airflow processes (minutes): TFK_REAL_AIRFLOW=1",
)
def test_lifecycle_and_approval_on_a_real_deployment(tmp_path: Path) -> None:
    airflow = RealAirflow(
        tmp_path,
        [ROOT / "dags" / "tfk_lifecycle.py", HERE / "real_airflow_dags" / "tfk_e2e_approval.py"],
        AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="true",
    )
    poller: StablePoller | None = None
    airflow.start()
    try:
        for dag in LIFECYCLE:
            wait_for(f"{dag} to be parsed", lambda dag=dag: airflow.dag_parsed(dag), 300, airflow)
            airflow.unpause(dag)
        # New data is the only trigger: retrain and publish follow from asset events.
        airflow.trigger("tfk_digits_data")
        retrain = wait_for(
            "the asset-triggered retrain",
            lambda: _asset_triggered_run(airflow, "tfk_retrain_on_data"),
            900,
            airflow,
        )
        publish = wait_for(
            "the asset-triggered publish",
            lambda: _asset_triggered_run(airflow, "tfk_publish_on_model"),
            900,
            airflow,
        )
        (model_event,) = _events(airflow, MODEL_URI)
        assert model_event["source_run_id"] == retrain["dag_run_id"]
        assert [r["run_id"] for r in model_event["created_dagruns"]] == [publish["dag_run_id"]]
        version = int(model_event["extra"]["version"])
        (serving_event,) = _events(airflow, SERVING_URI)
        assert serving_event["extra"]["version"] == version
        stable = str(serving_event["extra"]["endpoint"])

        # Two candidates: copies of the real export under the next version numbers.
        model_dir = airflow.local_root / "default" / ".claims" / "tfk-models" / "digits"
        approve, reject = version + 1, version + 2
        for v in (approve, reject):
            shutil.copytree(model_dir / str(version), model_dir / str(v))
        sample = (model_dir / str(version) / "assets.extra" / "tfk_sample_request.json").read_bytes()
        poller = StablePoller(f"{stable}:predict", sample)
        poller.start()
        wait_for("the stable endpoint to answer", lambda: poller.answers, 60)

        run = airflow.trigger("tfk_e2e_approval", {"version": approve})
        request = _answer(airflow, run, "Approve")
        assert request["subject"] == f"Promote digits version {approve}?"
        wait_for(
            "the approved publish",
            lambda: airflow.run_state("tfk_e2e_approval", run) == "success",
            600,
            airflow,
        )
        wait_for(f"version {approve} to answer the stable endpoint", lambda: approve in poller.seen(), 60)

        run = airflow.trigger("tfk_e2e_approval", {"version": reject})
        _answer(airflow, run, "Reject")
        wait_for(
            "the rejected publish to fail",
            lambda: airflow.run_state("tfk_e2e_approval", run) == "failed",
            600,
        )
        assert _state(airflow, "tfk_e2e_approval", run, "publish") == "failed"
        seen_after = len(poller.answers)
        wait_for("more answers after the rejection", lambda: len(poller.answers) > seen_after + 20, 60)
        poller.done.set()
        poller.join(timeout=60)
        assert reject not in poller.seen(), "the rejected version answered a client"
        assert poller.answers[-1] == approve and {version, approve} <= poller.seen()
        print(
            f"stable endpoint: {len(poller.answers)} answers "
            f"({ {v: poller.answers.count(v) for v in sorted(poller.seen())} }), {poller.errors} errors"
        )
        assert poller.errors == 0
    finally:
        if poller is not None:
            poller.done.set()
        airflow.stop()
        from airflow_tfk.serving.local import LocalServing
        from airflow_tfk.serving.spec import ServingSpec

        LocalServing(ServingSpec(model_name="digits", claim="tfk-models"), str(airflow.local_root)).delete(
            print
        )
