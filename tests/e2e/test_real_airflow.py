"""Real Airflow on one machine: ``airflow-tfk up`` and Airflow's REST API (v2, JWT).

- A deferrable training triggered through the REST API is seen ``deferred`` with its
  trigger held by the triggerer, and succeeds. Pausing its DAG while it waits does not stop
  the training: the triggerer goes on waiting, the training ends and its parameter server
  is ended by the triggerer, and the task stays ``scheduled`` until the DAG is unpaused.
- (``TFK_REAL_AIRFLOW=1``) New data triggers the retrain and the new model the publish,
  with no trigger but the first; then, through the HITL endpoints, candidates published as
  stage >> approve >> promote are approved, approved into Airflow's race (issue 35),
  rejected, and left to Airflow's timeout, while a client polls the stable endpoint: after
  each, Airflow's record and the served version agree, and only the approved one answers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.spec import ServingSpec
from tests.helpers import cluster_processes

from .approval_cases import run_case
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


@pytest.mark.skipif(
    os.environ.get("TFK_REAL_AIRFLOW") != "1",
    reason="four Airflow processes and a training (~100 s; keeps warm CI under 25 min): TFK_REAL_AIRFLOW=1",
)
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
        while time.monotonic() - held_since < 12:
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
LIFECYCLE = (
    "tfk_digits_data",
    "tfk_retrain_on_data",
    "tfk_publish_on_model",
    "tfk_e2e_approval_tasks",
    "tfk_e2e_approval_timeout",
)
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


# A client of the stable label over gRPC, whose answers name the version that served them
# (REST's do not). One line per request on stdout: the version, or "error ...". It runs
# until its stop file exists; TensorFlow loads in it, never in the test process.
GRPC_POLLER = """
import json, os, sys, time
from airflow_tfk.runtime.model_server.grpc_client import predict, signature_inputs
address, saved_model, request_file, stop = sys.argv[1:5]
body, inputs = json.load(open(request_file)), signature_inputs(saved_model)
import grpc
channel = grpc.insecure_channel(address)
while not os.path.exists(stop):
    try:
        answer = predict(address, "digits", body, inputs, label="stable", channel=channel)
        print(answer["model_version"], flush=True)
    except Exception as exc:
        print("error", str(exc).replace(chr(10), " ")[:300], flush=True)
    time.sleep(0.05)
"""


class StablePoller:
    """Clients of the stable label for the whole test: gRPC (which version answered) in a
    subprocess, REST (that it answered) in a thread."""

    def __init__(self, base: Path, grpc_address: str, rest_url: str, saved_model: Path) -> None:
        self.stop_file = base / "poller.stop"
        self.out = base / "poller.out"
        self.request = saved_model / "assets.extra" / "tfk_sample_request.json"
        with open(self.out, "wb") as out, open(base / "poller.err", "wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    GRPC_POLLER,
                    grpc_address,
                    str(saved_model),
                    str(self.request),
                    str(self.stop_file),
                ],
                cwd=str(ROOT),
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.rest_url, self.rest_ok, self.rest_errors = rest_url, 0, []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._rest, daemon=True)
        self.thread.start()

    def _rest(self) -> None:
        body = self.request.read_bytes()
        while not self.done.is_set():
            req = urllib.request.Request(
                self.rest_url, data=body, method="POST", headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    json.load(resp)["predictions"]
                self.rest_ok += 1
            except Exception as exc:  # every failure is a finding
                self.rest_errors.append(repr(exc)[:300])
            time.sleep(0.05)

    def lines(self) -> list[str]:
        return self.out.read_text().splitlines()

    def answers(self) -> list[int]:
        return [int(line) for line in self.lines() if line.isdigit()]

    def errors(self) -> list[str]:
        return [line for line in self.lines() if not line.isdigit()]

    def stop(self) -> None:
        self.done.set()
        self.stop_file.touch()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.thread.join(timeout=60)


def _candidate_versions(rest: str) -> dict[int, str]:
    """The versions under the candidate's name, which no client calls, by state (an
    earlier publish's candidate shows as END)."""
    with urllib.request.urlopen(f"{rest}/v1/models/digits-tfk-candidate", timeout=30) as resp:
        return {int(s["version"]): s["state"] for s in json.load(resp)["model_version_status"]}


@pytest.mark.skipif(
    os.environ.get("TFK_REAL_AIRFLOW") != "1",
    reason="two real trainings' worth of lifecycle on four Airflow processes (minutes): TFK_REAL_AIRFLOW=1",
)
def test_lifecycle_and_approval_on_a_real_deployment(tmp_path: Path) -> None:
    airflow = RealAirflow(
        tmp_path,
        [ROOT / "dags" / "tfk_lifecycle.py", HERE / "real_airflow_dags" / "tfk_e2e_approval_tasks.py"],
        AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="true",
        # the approval race made deterministic for runs that ask for it (tfk_e2e_race)
        AIRFLOW__CORE__PLUGINS_FOLDER=str(HERE / "real_airflow_plugins"),
        # the scheduler's sweep of unanswered approvals (default every 15 s)
        AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL="2",
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

        # Candidates: copies of the real export under the next version numbers.
        model_dir = airflow.local_root / "default" / ".claims" / "tfk-models" / "digits"
        approve, race, reject, timeout = (version + i for i in (1, 2, 3, 4))
        for v in (approve, race, reject, timeout):
            shutil.copytree(model_dir / str(version), model_dir / str(v))
        server = json.loads(
            (airflow.local_root / "default" / ".serving" / "tfs-digits" / "server.json").read_text()
        )
        poller = StablePoller(
            tmp_path, f"127.0.0.1:{server['grpc_port']}", f"{stable}:predict", model_dir / str(version)
        )
        wait_for("the stable label to answer over gRPC", lambda: poller.answers(), 300)
        serving = LocalServing(ServingSpec(model_name="digits", claim="tfk-models"), str(airflow.local_root))

        # After each answer, Airflow's record and the stable label agree (approval_cases).
        dag, t0 = "tfk_e2e_approval_tasks", time.monotonic()
        approved = run_case(airflow, serving, dag, approve, "Approve")
        assert approved["states"]["publish.promote"] == "success"
        assert approved["request"]["subject"] == f"Promote digits version {approve}?"
        assert "| accuracy |" in approved["request"]["body"]
        wait_for(f"version {approve} to answer the stable label", lambda: approve in poller.answers(), 60)
        raced = run_case(airflow, serving, dag, race, "Approve", race=True)
        assert raced["states"]["publish.approve"] == "failed"  # Airflow's race did happen
        assert raced["states"]["publish.promote"] == "upstream_failed"
        rejected = run_case(airflow, serving, dag, reject, "Reject")
        assert rejected["states"]["publish.promote"] == "skipped"
        timed_out = run_case(airflow, serving, "tfk_e2e_approval_timeout", timeout, None)
        assert timed_out["states"]["publish.promote"] == "skipped"
        path = f"/dags/tfk_e2e_approval_timeout/dagRuns/{timed_out['run']}/taskInstances/publish.approve/-1"
        detail = airflow.api("GET", f"{path}/hitlDetails")  # Airflow's own timeout: its default, no one
        assert detail["chosen_options"] == ["Reject"] and not detail.get("responded_by"), detail
        print(f"approval cases: {time.monotonic() - t0:.1f} s", flush=True)
        seen_after = len(poller.answers())
        wait_for("more answers after the cases", lambda: len(poller.answers()) > seen_after + 20, 120)
        poller.stop()
        answers = poller.answers()
        counts = {v: answers.count(v) for v in sorted(set(answers))}
        print(f"stable label: gRPC answers by version {counts}; REST {poller.rest_ok} answers")
        assert answers[-1] == approve and set(counts) == {version, approve}, counts  # nothing else answered
        assert poller.errors() == [] and poller.rest_errors == [], (
            poller.errors()[:5],
            poller.rest_errors[:5],
        )
    finally:
        if poller is not None:
            poller.stop()
        airflow.stop()
        LocalServing(ServingSpec(model_name="digits", claim="tfk-models"), str(airflow.local_root)).delete(
            print
        )
