"""A person's approval on a real deployment (api-server, scheduler, dag-processor,
triggerer): after every answer, what Airflow recorded and what the ``stable`` label
serves agree (issues 35 and 37).

The publish is stage >> approve (Airflow's ApprovalOperator) >> promote, withdraw as
teardown (airflow_tfk/operators/approval_flow.py). Cases, one deployment, one model
server, a gRPC client of the stable label the whole time:

- approve: promote ``success`` and the version serves;
- the approval race (issue 35): the parked approval's late exit makes the scheduler fail
  the resumed approval task (forced by real_airflow_plugins/tfk_approval_race.py); the
  promote never runs, the candidate is withdrawn, the version never answers a client;
- reject: promote ``skipped``, never served;
- no answer: Airflow's own timeout resumes with the default option and ``timedout``
  (no person); promote ``skipped``, never served, and the log says nobody answered;
- the in-task approval (``TFPublishModelOperator(approval=...)``) in the same race: the
  fence refuses the promotion; Airflow's ``failed`` and the label agree.

No training: an untrained digits model exported by the platform's own export.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from .approval_cases import run_case
from .real_airflow import ROOT, RealAirflow, wait_for
from .test_real_airflow import StablePoller

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]
TASKS, TIMEOUT, IN_TASK = "tfk_e2e_approval_tasks", "tfk_e2e_approval_timeout", "tfk_e2e_approval"


def test_approval_outcomes_agree_with_what_serves(tmp_path: Path) -> None:
    started = time.monotonic()
    airflow = RealAirflow(
        tmp_path,
        [HERE / "real_airflow_dags" / f"{d}.py" for d in (TASKS, IN_TASK)],
        AIRFLOW__CORE__PLUGINS_FOLDER=str(HERE / "real_airflow_plugins"),
        # the scheduler's sweep of unanswered requests (default every 15 s)
        AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL="2",
    )
    models = airflow.local_root / "default" / ".claims" / "tfk-models"
    subprocess.run(
        [sys.executable, "-m", "tests.e2e.approval_model", str(models), *map(str, range(1, 7))],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    from airflow_tfk.serving.local import LocalServing
    from airflow_tfk.serving.spec import ServingSpec

    serving = LocalServing(ServingSpec(model_name="digits", claim="tfk-models"), str(airflow.local_root))
    poller: StablePoller | None = None
    airflow.start()
    timings: dict[str, float] = {"start": time.monotonic() - started}

    def case(name: str, dag: str, version: int, choice: str | None, race: bool = False) -> dict:
        if dag == IN_TASK:
            out = run_case(
                airflow,
                serving,
                dag,
                version,
                choice,
                race=race,
                tasks=["publish"],
                parked="publish",
                publishes="publish",
            )
        else:
            out = run_case(airflow, serving, dag, version, choice, race=race)
        timings[name] = out["seconds"]
        return out

    try:
        for dag in (TASKS, TIMEOUT, IN_TASK):
            wait_for(f"{dag} to be parsed", lambda dag=dag: airflow.dag_parsed(dag), 300, airflow)
            airflow.unpause(dag)
        timings["parse"] = time.monotonic() - started - timings["start"]
        first = case("approve", TASKS, 1, "Approve")
        assert first["states"]["publish.promote"] == "success"
        assert first["request"]["subject"] == "Promote digits version 1?"
        assert "| accuracy |" in first["request"]["body"]
        server = serving.process.record()
        assert server is not None
        poller = StablePoller(
            tmp_path,
            f"127.0.0.1:{server['grpc_port']}",
            f"{serving.endpoint('stable')}:predict",
            models / "digits" / "1",
        )
        wait_for("the stable label to answer over gRPC", lambda: poller.answers(), 300)

        raced = case("race", TASKS, 2, "Approve", race=True)
        assert raced["states"]["publish.approve"] == "failed", raced  # the race did happen
        assert raced["states"]["publish.promote"] == "upstream_failed"

        rejected = case("reject", TASKS, 3, "Reject")
        assert rejected["states"]["publish.promote"] == "skipped"

        timed_out = case("timeout", TIMEOUT, 4, None)
        assert timed_out["states"]["publish.promote"] == "skipped"
        path = f"/dags/{TIMEOUT}/dagRuns/{timed_out['run']}/taskInstances/publish.approve/-1/hitlDetails"
        detail = airflow.api("GET", path)  # Airflow's own timeout: the default, and no person
        assert detail["chosen_options"] == ["Reject"] and not detail.get("responded_by"), detail

        in_task = case("in-task race", IN_TASK, 5, "Approve", race=True)
        assert in_task["states"]["publish"] == "failed"

        last = case("approve again", TASKS, 6, "Approve")
        assert last["states"]["publish.promote"] == "success"
        wait_for("version 6 to answer the stable label", lambda: 6 in poller.answers(), 60)
        seen = len(poller.answers())
        wait_for("more answers", lambda: len(poller.answers()) > seen + 20, 120)
        poller.stop()
        answers = poller.answers()
        counts = {v: answers.count(v) for v in sorted(set(answers))}
        print(f"stable label: gRPC answers by version {counts}; REST {poller.rest_ok} answers")
        assert set(counts) == {1, 6} and answers[-1] == 6, counts  # 2..5 never answered a client
        assert poller.errors() == [] and poller.rest_errors == [], (
            poller.errors()[:5],
            poller.rest_errors[:5],
        )
    finally:
        if poller is not None:
            poller.stop()
        airflow.stop()
        serving.delete(print)
        timings["total"] = time.monotonic() - started
        print("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()), flush=True)
