"""Stall detection (issue 10 item 12): pure detector, and the wait loop on a real local
cluster where one worker hangs after its peer finished."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local import LocalBackend
from airflow_tfk.policies import Outcome, Verdict
from airflow_tfk.spec import Mode
from airflow_tfk.stall import StallDetector
from airflow_tfk.status import ClusterStatus, Phase, TaskStatus
from airflow_tfk.watch import wait_for_cluster
from tests.helpers import python_cluster


def status(*phases: Phase) -> ClusterStatus:
    return ClusterStatus(
        tasks=tuple(TaskStatus("worker", i, p, "", "", None, 0) for i, p in enumerate(phases))
    )


def test_reports_each_stalled_task_once_after_the_bound_and_names_it_in_the_failure() -> None:
    now = [0.0]
    d = StallDetector(Mode.ALL_REDUCE, {"worker": 3}, bound=60, clock=lambda: now[0])
    assert d.observe(status(Phase.RUNNING, Phase.RUNNING, Phase.RUNNING)) == []
    assert d.observe(status(Phase.SUCCEEDED, Phase.RUNNING, Phase.SUCCEEDED)) == []  # peers just finished
    now[0] = 59
    assert d.observe(status(Phase.SUCCEEDED, Phase.RUNNING, Phase.SUCCEEDED)) == []
    now[0] = 61
    out = d.observe(status(Phase.SUCCEEDED, Phase.RUNNING, Phase.SUCCEEDED))
    assert len(out) == 1 and out[0].startswith("task worker-1 has not finished 61 s after")
    assert d.observe(status(Phase.SUCCEEDED, Phase.RUNNING, Phase.SUCCEEDED)) == []  # once
    failed = d.blame(Verdict(Outcome.FAILED, "task worker-1 failed (DeadlineExceeded)"))
    assert failed.message.endswith("[stalled before: worker-1]")
    assert d.blame(Verdict(Outcome.SUCCEEDED, "ok")).message == "ok"


@pytest.mark.timeout(60)
def test_wait_loop_reports_a_hung_worker_on_a_real_local_cluster(tmp_path: Path) -> None:
    hang = "import os, time; time.sleep(3600 if os.environ['TFK_INDEX'] == '1' else 0)"
    spec = python_cluster(
        "stall",
        hang,
        workers=2,
        max_duration_seconds=6,
    )
    backend = LocalBackend(
        str(tmp_path / "root"), workdir=str(tmp_path), kill_grace_seconds=0.3, poll_interval=0.1
    )
    ref = backend.create(spec)
    said: list[str] = []
    try:
        verdict = wait_for_cluster(
            backend,
            ref,
            spec.mode,
            {"worker": 2},
            timeout=30,
            progress_interval=60,
            emit=said.append,
            stall_seconds=1,
        )
    finally:
        backend.delete(ClusterRef(ref.name, ref.namespace))
    assert any(m.startswith("task worker-1 has not finished") for m in said), said
    assert verdict.outcome is Outcome.FAILED
    assert verdict.failed_task is not None and verdict.failed_task.name == "worker-1"
    assert "stalled before: worker-1" in verdict.message
