"""Stall detection: pure detectors, and the wait loop on a real local cluster where one
worker hangs after its peer finished, or one worker is frozen by SIGSTOP mid-training."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.errors import SpecError, TrainingFailed
from airflow_tfk.core.status import Activity, ClusterStatus, Phase, TaskStatus
from airflow_tfk.protocol.progress import Progress
from airflow_tfk.run.policies import Outcome, Verdict
from airflow_tfk.run.stall import ProgressStall, StallDetector
from airflow_tfk.run.wait import Wait, failure_of, wait_for_cluster, wait_result
from airflow_tfk.spec.cluster import Mode
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


# -- no progress while the tasks run ------------------------------------------------------------
def _progress(step: int, status: str = "running") -> Progress:
    return Progress(step, 4000, None, 0.0, float(step), status)


def ps_status(*, chief: Phase = Phase.RUNNING) -> ClusterStatus:
    tasks = [TaskStatus("chief", 0, chief), TaskStatus("ps", 0, Phase.RUNNING)]
    tasks += [TaskStatus("worker", i, Phase.RUNNING) for i in range(3)]
    return ClusterStatus(tasks=tuple(tasks))


def test_progress_standing_still_warns_at_half_the_bound_then_fails_naming_the_silent_task() -> None:
    now = [0.0]
    p = ProgressStall(("chief", 0), bound=100, clock=lambda: now[0])
    running = ps_status()
    assert not p.stalled(running) and p.warning(running) is None  # not armed: no line yet
    p.saw(_progress(2400))
    now[0] = 49
    assert p.warning(running) is None
    now[0] = 51
    warning = p.warning(running)
    assert warning is not None and "no progress for 51 s" in warning and "2400/4000" in warning
    assert p.warning(running) is None  # once per standstill
    assert not p.stalled(running)
    now[0] = 101
    assert p.stalled(running)
    assert not p.stalled(ps_status(chief=Phase.SUCCEEDED))  # only while the task runs
    wall = 10_000.0
    activity = {
        "chief-0": Activity(wall - 101),
        "ps-0": Activity(wall - 3),
        "worker-0": Activity(wall - 2),
        "worker-1": Activity(wall - 190),
        "worker-2": Activity(None),
    }
    verdict = p.verdict(running, activity, wall)
    assert verdict.outcome is Outcome.FAILED
    assert verdict.failed_task is not None and verdict.failed_task.reason == "Stalled"
    # worker-1 was silent longest; the chief's own silence is as long as the standstill
    assert "no log output for 101 s or more: worker-1 (last output 190 s ago), chief-0" in verdict.message
    assert "went silent: worker-1, chief-0" in verdict.message
    assert "no log output seen yet: worker-2" in verdict.message
    assert "worker-0 (" not in verdict.message and "ps-0 (" not in verdict.message
    # A stopped process is named first, and is the task the failure blames.
    activity["worker-2"] = Activity(None, "its process 42 is stopped")
    stopped = p.verdict(running, activity, wall)
    assert stopped.failed_task is not None and stopped.failed_task.name == "worker-2"
    assert stopped.message.startswith("task worker-2 failed (Stalled): no progress for 101 s")
    assert str(TrainingFailed("worker-2", "Stalled", stopped.message)) == stopped.message


def test_a_moving_step_rearms_and_done_or_off_never_stalls() -> None:
    now = [0.0]
    p = ProgressStall(("chief", 0), bound=10, clock=lambda: now[0])
    p.saw(_progress(1))
    now[0] = 9
    p.saw(_progress(1))  # the same line read again is no progress
    now[0] = 11
    assert p.stalled(ps_status())
    p.saw(_progress(2))
    assert not p.stalled(ps_status())
    p.saw(_progress(4000, "done"))  # exporting after the last step: not a stall
    now[0] = 100
    assert not p.stalled(ps_status())
    off = ProgressStall(("chief", 0), bound=0, clock=lambda: now[0])
    off.saw(_progress(1))
    now[0] = 10**6
    assert not off.stalled(ps_status()) and off.warning(ps_status()) is None


@pytest.mark.parametrize(
    "value", [-1, 0.5, 10**400, float("nan"), float("inf"), True, "60", [60]]
)  # None: the default
def test_stall_seconds_is_checked_before_anything_is_created(value) -> None:
    from airflow_tfk.operators.training import TFTrainingOperator
    from airflow_tfk.sensors.cluster import TFClusterSensor

    with pytest.raises(SpecError) as err:
        TFTrainingOperator(task_id="t", cluster_spec={"image": "x:1"}, stall_seconds=value)
    assert err.value.field == "stall_seconds"
    with pytest.raises(SpecError):
        TFClusterSensor(task_id="s", cluster={}, stall_seconds=value)


def test_stall_seconds_reaches_the_trigger_and_the_training_file() -> None:
    from airflow_tfk.dagfactory.training import parse_training
    from airflow_tfk.run.handle import ClusterHandle
    from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

    spec = python_cluster("t", "pass")
    handle = ClusterHandle.for_spec(spec, LocalBackend("/nonexistent"), None)
    trigger = TFClusterDoneTrigger.for_handle(handle, progress_interval=5, stall_seconds=42)
    assert trigger.serialize()[1]["stall_seconds"] == 42
    assert TFClusterDoneTrigger(**trigger.serialize()[1]).stall_seconds == 42
    data = {
        "cluster": {"image": "x:1", "command": ["python"], "mode": "all_reduce", "worker": {}},
        "stall_seconds": 120,
    }
    assert parse_training(data, default_dag_id="d", source="f.yaml").stall_seconds == 120
    with pytest.raises(SpecError) as err:
        parse_training({**data, "stall_seconds": "2m"}, default_dag_id="d", source="f.yaml")
    assert err.value.field == "stall_seconds"


# Every worker beats (a counter file and a log line) every 0.1 s; the chief advances one
# step per round in which every worker beat, as a synchronous coordinator would, and
# prints a progress line per step. One SIGSTOPped worker stops the chief's progress while
# every task still runs.
LOCKSTEP = """
import os, sys, time
sys.path.insert(0, os.environ["REPO_DIR"])
from airflow_tfk.protocol.progress import progress_line
beats, role, index = os.environ["BEATS"], os.environ["TFK_ROLE"], os.environ["TFK_INDEX"]
start = time.time()
if role == "worker":
    n = 0
    while True:
        n += 1
        with open(os.path.join(beats, index + ".tmp"), "w") as f:
            f.write(str(n))
        os.replace(os.path.join(beats, index + ".tmp"), os.path.join(beats, index))
        print("beat", n, flush=True)
        time.sleep(0.1)
elif role == "chief":
    seen, step = {}, 0
    while step < 4000:
        now = {}
        for i in range(2):
            try:
                now[i] = open(os.path.join(beats, str(i))).read()
            except OSError:
                now[i] = None
        if all(now[i] is not None and now[i] != seen.get(i) for i in range(2)):
            seen, step = now, step + 1
            print(progress_line(step, 4000, 0.5, start), flush=True)
        time.sleep(0.1)
else:
    time.sleep(3600)
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("frozen", ["worker-1", "chief-0"])
def test_a_sigstopped_task_fails_the_training_as_stalled_naming_it(tmp_path: Path, frozen: str) -> None:
    import os
    import signal
    import time

    from airflow_tfk.spec.cluster import RoleSpec
    from tests.helpers import ROOT

    beats = tmp_path / "beats"
    beats.mkdir()
    spec = python_cluster(
        "frozen",
        LOCKSTEP,
        workers=2,
        mode="parameter_server",
        chief=RoleSpec(),
        ps=RoleSpec(),
        env={"BEATS": str(beats), "REPO_DIR": str(ROOT)},
    )
    backend = LocalBackend(
        str(tmp_path / "root"), workdir=str(tmp_path), kill_grace_seconds=0.3, poll_interval=0.2
    )
    ref = backend.create(spec)
    said: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while '"step":5,' not in backend.logs(ref, "chief", 0):
            assert time.monotonic() < deadline, backend.logs(ref, "chief", 0)
            time.sleep(0.2)
        (task,) = [t for t in backend._tasks(ref) if t.name == frozen]
        child = backend._child(ref, task)
        assert child is not None
        os.kill(child.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        verdict = wait_for_cluster(
            backend,
            ref,
            spec.mode,
            {"chief": 1, "ps": 1, "worker": 2},
            timeout=60,
            progress_interval=1,
            emit=said.append,
            stall_seconds=4,
        )
        took = time.monotonic() - stopped_at
    finally:
        backend.delete(ClusterRef(ref.name, ref.namespace))
    assert verdict.outcome is Outcome.FAILED, verdict
    assert verdict.failed_task is not None and verdict.failed_task.name == frozen, verdict
    assert f"{frozen} (its process {child.pid} is stopped" in verdict.message
    assert f"went silent: {frozen}" in verdict.message
    assert any(m.startswith("WARNING no progress for") for m in said), said
    print(f"{frozen}: failed as stalled {took:.1f} s after SIGSTOP (bound 4 s)")
    assert took < 15, took  # the bound (4 s) plus a read or two, not the run's deadline
    error = failure_of(wait_result(verdict), ref.name)
    assert isinstance(error, TrainingFailed) and error.task == frozen and error.reason == "Stalled"


@pytest.mark.parametrize(("interval", "bound"), [(30, 300), (60, 600), (5, 120), (1, 120), (2, 120)])
def test_the_default_stall_bound_follows_the_progress_interval(interval: float, bound: float) -> None:
    """Minutes, not a quarter of an hour: 10 progress intervals, at least 120 s, wherever
    the default is taken (the operator, the sensor, the wait, a training file without it)."""
    from airflow_tfk.dagfactory.training import parse_training
    from airflow_tfk.operators.training import TFTrainingOperator
    from airflow_tfk.sensors.cluster import TFClusterSensor

    op = TFTrainingOperator(task_id="t", backend="local", cluster_spec={}, progress_interval=interval)
    sensor = TFClusterSensor(task_id="s", cluster={}, progress_interval=interval)
    wait = Wait(
        LocalBackend("/nonexistent"),
        ClusterRef("c", "default"),
        Mode.ALL_REDUCE,
        {"worker": 1},
        progress_interval=interval,
    )
    assert op.stall_seconds == sensor.stall_seconds == wait.stall_seconds == wait.progress.bound == bound
    data = {
        "cluster": {"image": "x:1", "command": ["python"], "mode": "all_reduce", "worker": {}},
        "progress_interval": interval,
    }
    assert parse_training(data, default_dag_id="d", source="f.yaml").stall_seconds is None  # the operator's


def test_a_frozen_worker_is_named_within_the_default_bound() -> None:
    """At the default progress interval a frozen worker fails the training, named, within
    5 minutes of the last step: the wait's reads (backing off to 4 intervals) see it."""
    now = [0.0]
    wait = Wait(
        LocalBackend("/nonexistent"),
        ClusterRef("c", "default"),
        Mode.PARAMETER_SERVER,
        {"chief": 1, "ps": 1, "worker": 3},
    )
    p = ProgressStall(("chief", 0), bound=wait.stall_seconds, clock=lambda: now[0])
    p.saw(_progress(10))
    running = ps_status()
    now[0] = 4 * 30 * 2  # two backed-off reads later: not yet
    assert not p.stalled(running)
    now[0] = 300
    assert p.stalled(running)
    activity = {
        "chief-0": Activity(1000.0 - 1),
        "worker-1": Activity(1000.0 - 299, "its process 7 is stopped"),
    }
    verdict = p.verdict(running, activity, 1000.0)
    assert verdict.failed_task is not None and verdict.failed_task.name == "worker-1"
    assert "no progress for 300 s" in verdict.message
