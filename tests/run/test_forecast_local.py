"""A predictive deadline on the real local backend with real TensorFlow.

A one-worker training is paced so that it would end about 120 s after it starts, against
a deadline 60 s after the wait starts. The forecast alerts within two progress lines of
the projection passing the deadline, long before the deadline, with the step and ETA;
``checkpoint_and_stop`` ends the wait at once, the delete's notice leaves a checkpoint, and
a retry of the same training resumes from it.
"""

from __future__ import annotations

import re
import sys
import time

import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.run.forecast import DeadlineForecast
from airflow_tfk.run.policies import Outcome
from airflow_tfk.run.wait import Wait, run_blocking
from airflow_tfk.spec.cluster import Mode, TFClusterSpec
from tests.helpers import ROOT

pytestmark = pytest.mark.e2e

STEPS, PACE = 2400, 0.05  # about 120 s of training
DEADLINE = 60.0
RESUMED = re.compile(r"resumed at step (\d+)")
SAVED = re.compile(r"checkpoint saved on notice at step (\d+)")


def _spec() -> TFClusterSpec:
    return TFClusterSpec.from_dict(
        {
            "name": "forecast",
            "image": "local",
            "mode": "all_reduce",
            "command": [sys.executable, "-m", "tests.run.paced_app"],
            "args": [
                "--tfk_steps",
                str(STEPS),
                "--tfk_checkpoint_every",
                "100000",  # no periodic checkpoint: only the notice's
                "--tfk_progress_every",
                "20",
                "--pace_seconds",
                str(PACE),
            ],
            "storage": {"models": {"claim": "tfk-models"}},
            "worker": {"replicas": 1},
            "retries_per_index": 0,
            "termination_grace_seconds": 60,
        }
    )


def test_checkpoint_and_stop_alerts_early_stops_and_a_retry_resumes(tmp_path, summary_line):
    # the paced app is a module of the tests: run from the repository
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(ROOT))
    backend.claim_path("default", "tfk-models")
    lines: list[str] = []
    alerts: list[tuple[float, dict]] = []

    def emit(text: str) -> None:
        lines.append(text)
        print(text)

    ref = backend.create(_spec())
    started = time.time()
    try:
        forecast = DeadlineForecast(
            started + DEADLINE,
            "the test's deadline",
            "checkpoint_and_stop",
            emit,
            on_alert=lambda info: alerts.append((time.time(), info)),
        )
        wait = Wait(
            backend,
            ref,
            Mode.ALL_REDUCE,
            {"worker": 1},
            progress_interval=2.0,
            emit=emit,
            forecasts=(forecast,),
        )
        verdict = run_blocking(wait.run())
        stopped = time.time()
    finally:
        backend.delete(ref)  # the notice: the worker saves a checkpoint at its next step
    first_log = backend.logs(ref, "worker", 0)
    assert verdict.outcome is Outcome.FAILED and "stopped before its deadline" in verdict.message, verdict
    assert len(alerts) == 1
    at, info = alerts[0]
    # long before the deadline: about 14 s on a quiet machine (TensorFlow's start-up, then
    # two progress reads); the bound leaves room for a loaded one
    assert at - started < 0.75 * DEADLINE, f"alerted only {at - started:.1f}s after the start"
    assert info["projected_end"] > started + DEADLINE and info["step"] > 0 and info["eta_seconds"] > 0
    # within two progress lines of the projection passing the deadline: every line of this
    # paced run with an ETA is late, so the alert comes with the second such line read
    read = [x for x in lines if x.startswith("[worker-0] step ") and "ETA unknown" not in x]
    assert len(read) <= 2, read
    saved = [int(s) for s in SAVED.findall(first_log)]
    assert saved and saved[0] >= info["step"], (saved, info)

    retry = backend.create(_spec())
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            found = RESUMED.findall(backend.logs(retry, "worker", 0))
            if found:
                break
            time.sleep(0.5)
    finally:
        backend.delete(retry)
    assert found and int(found[0]) == saved[0], (found, saved)
    summary_line(
        f"deadline forecast (local, paced to ~{STEPS * PACE:.0f}s vs a {DEADLINE:.0f}s deadline): alerted "
        f"{at - started:.1f}s after the start at step {info['step']} (ETA {info['eta_seconds']:.0f}s), "
        f"stopped {stopped - started:.1f}s, checkpoint at step {saved[0]}, the retry resumed from it"
    )
