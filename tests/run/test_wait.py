from __future__ import annotations

from typing import Any

from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus
from airflow_tfk.protocol.progress import Progress, last_progress, parse_line, progress_line
from airflow_tfk.run.wait import format_duration, format_progress


def test_progress_line_roundtrip_and_eta() -> None:
    line = progress_line(250, 1000, 0.5, start_time=100.0, now=150.0)
    p = parse_line("2026-11-22 INFO " + line)
    assert p == Progress(250, 1000, 0.5, 100.0, 150.0, "running")
    assert p.fraction == 0.25
    assert p.eta_seconds() == 150.0  # 50 s for 250 steps -> 150 s for the other 750
    assert format_progress(p) == "step 250/1000 (25.0%), loss 0.5000, elapsed 0:00:50, ETA 0:02:30"


def test_noise_is_not_progress() -> None:
    assert parse_line("step 3 loss 0.1") is None
    assert parse_line('{"tfk": "other", "step": 1}') is None
    assert parse_line('{"tfk": "progress", "step": "x"}') is None
    text = "\n".join(
        [
            progress_line(1, 10, None, 0.0, now=1.0),
            "garbage {",
            progress_line(2, 10, None, 0.0, now=2.0),
            "Traceback...",
        ]
    )
    assert last_progress(text).step == 2


def test_eta_unknown_before_first_step() -> None:
    p = Progress(0, 100, None, 10.0, 10.0)
    assert p.eta_seconds() is None
    assert format_progress(p).endswith("ETA unknown")
    assert format_duration(3725) == "1:02:05"


# -- the one translation of a wait's end ----------------------------------------------------
def test_wait_result_and_failure_of() -> None:
    from airflow.sdk.exceptions import AirflowTaskTimeout

    from airflow_tfk._airflow.compat import airflow_error
    from airflow_tfk.core.errors import TrainingFailed, WaitTimedOut
    from airflow_tfk.core.status import Phase, TaskStatus
    from airflow_tfk.run.policies import Outcome, Verdict
    from airflow_tfk.run.wait import failure_of, wait_result

    oom = TaskStatus("worker", 1, Phase.FAILED, "OOMKilled", "", 137)
    assert failure_of(wait_result(Verdict(Outcome.SUCCEEDED, "ok")), "c") is None
    failed = failure_of(wait_result(Verdict(Outcome.FAILED, "task worker-1 failed", oom)), "c")
    assert isinstance(failed, TrainingFailed) and (failed.task, failed.reason) == ("worker-1", "OOMKilled")
    gone = failure_of(wait_result(Verdict(Outcome.FAILED, "the cluster no longer exists")), "c")
    assert isinstance(gone, TrainingFailed) and (gone.task, gone.reason) == ("c", "Deleted")
    late = failure_of(wait_result(Verdict(Outcome.RUNNING, "exceeded")), "c")
    # the wait knows no Airflow: its own timeout, which the face raises as Airflow's
    assert isinstance(late, WaitTimedOut) and "cluster c: exceeded" in str(late)
    raised = airflow_error(late)
    assert isinstance(raised, AirflowTaskTimeout) and str(raised) == str(late)
    assert airflow_error(gone) is gone
    error = failure_of({"status": "error", "message": "boom", "cluster": {"name": "c"}}, "c")
    assert isinstance(error, TrainingFailed) and error.reason == "error"


def test_wait_for_cluster_gives_up_at_its_timeout(local_root) -> None:
    import time

    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.run.policies import Outcome
    from airflow_tfk.run.wait import wait_for_cluster
    from airflow_tfk.spec.cluster import Mode, TFClusterSpec
    from tests.helpers import assert_no_processes, spec_dict

    backend = LocalBackend(str(local_root))
    spec = TFClusterSpec.from_dict(
        {**spec_dict("all_reduce", workers=1, STEPS="1000", STEP_SECONDS="1"), "name": "w"}
    )
    ref = backend.create(spec)
    lines: list[str] = []
    started = time.monotonic()
    verdict = wait_for_cluster(
        backend, ref, Mode.ALL_REDUCE, {"worker": 1}, timeout=2, progress_interval=0.5, emit=lines.append
    )
    assert verdict.outcome is Outcome.RUNNING and verdict.message == "still running after 2 s"
    assert 2 <= time.monotonic() - started < 30
    assert any(line.startswith("cluster: worker") for line in lines)
    backend.delete(ref)
    assert_no_processes(local_root)


def test_the_first_progress_line_shows_within_the_first_interval(tmp_path) -> None:
    """A real local cluster whose chief prints its first progress line, then trains on
    until the wait has shown that line: with a 30 s progress interval the line must reach
    the log while the training runs (not only at the verdict). The chief waits on the
    line itself, not on a clock: on a loaded machine its start-up alone may take seconds."""
    import sys

    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.run.wait import wait_for_cluster
    from airflow_tfk.spec.cluster import Mode, TFClusterSpec

    shown = tmp_path / "first-line-shown"
    chief = (
        "import os, sys, time; from airflow_tfk.runtime.progress import progress_line as p; "
        "t = time.time(); print(p(3, 100, 0.5, t), flush=True); end = time.time() + 40\n"
        f"while not os.path.exists({str(shown)!r}):\n"
        "    if time.time() > end: sys.exit('the first line was not shown while the training ran')\n"
        "    time.sleep(0.05)\n"
        "print(p(100, 100, 0.1, t, 'done'), flush=True)"
    )
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), poll_interval=0.2)
    spec = TFClusterSpec.from_dict(
        {
            "name": "first-line",
            "image": "local",
            "mode": "parameter_server",
            "command": [sys.executable, "-c", "import time; time.sleep(60)"],
            "chief": {"replicas": 1, "command": [sys.executable, "-c", chief]},
            "ps": {"replicas": 1},
            "worker": {"replicas": 1},
            "ps_grace_seconds": 0,
        }
    )
    ref = backend.create(spec)
    seen: list[str] = []

    def emit(msg: str) -> None:
        seen.append(msg)
        if msg.startswith("[chief-0] step"):
            shown.touch()

    try:
        verdict = wait_for_cluster(
            backend,
            ref,
            Mode.PARAMETER_SERVER,
            {"chief": 1, "ps": 1, "worker": 1},
            timeout=60,
            progress_interval=30,
            emit=emit,
        )
    finally:
        backend.delete(ref)
    # the chief succeeds only once the wait has shown its first line
    assert verdict.outcome.value == "succeeded", (verdict, seen)
    progress = [m for m in seen if m.startswith("[chief-0] step")]
    assert progress and progress[0].startswith("[chief-0] step 3/100"), seen
    assert progress[-1].startswith("[chief-0] step 100/100")


def test_summaries_come_at_a_change_of_phase_and_at_most_every_few_seconds(monkeypatch) -> None:
    """600 workers starting one by one, then finishing one by one, within 20 s: a handful of
    summary lines (each phase change, then counts every SUMMARY_INTERVAL_SECONDS), and the
    last status before the verdict is always shown."""
    from airflow_tfk.backends.base import ClusterRef
    from airflow_tfk.run import wait as watch
    from airflow_tfk.spec.cluster import Mode

    clock = [1000.0]
    monkeypatch.setattr(watch, "_monotonic", lambda: clock[0])
    lines: list[str] = []
    backend: Any = object()  # step() judges the statuses it is given; nothing is read
    loop = watch.Wait(
        backend, ClusterRef("default", "c"), Mode.ALL_REDUCE, {"worker": 600}, emit=lines.append
    )
    n = 600
    phase = [Phase.PENDING] * n
    verdicts = []
    for step in range(2 * n):
        i = step % n
        phase[i] = Phase.RUNNING if step < n else Phase.SUCCEEDED
        clock[0] += 20.0 / (2 * n)
        tasks = tuple(TaskStatus("worker", k, phase[k], "", "", None, 0) for k in range(n))
        verdicts.append(loop.step(ClusterStatus(tasks=tasks)))
    summaries = [line for line in lines if line.startswith("cluster: ")]
    assert verdicts[-1].outcome.value == "succeeded"
    # phase changes: first running (pending+running), all running, first succeeded, all succeeded
    assert 4 <= len(summaries) <= 4 + 20 / watch.SUMMARY_INTERVAL_SECONDS + 1, summaries
    assert summaries[-1] == "cluster: worker 600 succeeded"
    assert "cluster: worker 600 running" in summaries


def test_a_timeout_raised_in_a_callback_of_the_loop_ends_the_blocking_wait() -> None:
    """Airflow's execution_timeout raises from a SIGALRM handler, in whatever runs at that
    moment; when that is one of the event loop's own callbacks, the blocking wait still
    ends with it (the loop alone would log it and wait on)."""
    import asyncio
    import contextlib
    import time

    import pytest

    from airflow_tfk.backends.base import ClusterRef, ClusterWatcher
    from airflow_tfk.run.wait import wait_for_cluster
    from airflow_tfk.spec.cluster import Mode

    class Timeout(BaseException):
        pass

    def alarm() -> None:
        raise Timeout("Timeout, PID: 1")

    class Watcher(ClusterWatcher):
        async def next(self, timeout: float) -> ClusterStatus | None:
            asyncio.get_running_loop().call_later(0.2, alarm)
            await asyncio.sleep(timeout)
            return ClusterStatus(tasks=(TaskStatus("worker", 0, Phase.RUNNING),))

        async def logs(self, role: str, index: int, tail_lines: int | None = None) -> str:
            return ""

    class Backend:
        def watcher(self, ref: ClusterRef) -> Any:
            return contextlib.nullcontext(Watcher(self, ref))  # type: ignore[arg-type]

    started = time.monotonic()
    with pytest.raises(Timeout):
        wait_for_cluster(Backend(), ClusterRef("c", "ns"), Mode.ALL_REDUCE, {"worker": 1}, timeout=20)  # type: ignore[arg-type]
    assert time.monotonic() - started < 5


def test_no_progress_read_before_the_progress_task_runs_then_the_quick_reads() -> None:
    """A read before the task runs finds nothing (a request per training on Kubernetes)
    and would spend the quick first reads before the first line can exist: the wait reads
    only once the task runs, then every ``first_interval`` until the first line."""
    import asyncio

    from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus
    from airflow_tfk.run.wait import Wait
    from airflow_tfk.spec.cluster import Mode

    pending = ClusterStatus(tasks=(TaskStatus("worker", 0, Phase.PENDING),))
    running = ClusterStatus(tasks=(TaskStatus("worker", 0, Phase.RUNNING),))

    class Watcher:
        reads = 0

        async def logs(self, role, index, tail_lines=None):
            Watcher.reads += 1
            return ""

        async def queue_message(self):
            return None

    wait = Wait(None, None, Mode.ALL_REDUCE, {"worker": 1}, progress_interval=30.0)  # type: ignore[arg-type]
    watcher = Watcher()
    for _ in range(5):  # statuses while it waits for its pod: no read, and no wake-up for one
        asyncio.run(wait.check(watcher, pending))  # type: ignore[arg-type]
        assert wait.wake_in(True) > wait.reporter.first_interval
    assert Watcher.reads == 0
    asyncio.run(wait.check(watcher, running))  # type: ignore[arg-type]
    assert Watcher.reads == 1
    assert wait.wake_in(True) <= wait.reporter.first_interval  # the quick reads begin


def test_the_reads_before_the_first_line_back_off_to_the_interval() -> None:
    """Before the first progress line: 2, 4, 8, 16 s between reads, then the interval;
    a slow start-up costs a few reads in its first minute, not one every 2 s."""
    from airflow_tfk.run.wait import ProgressReporter

    rep = ProgressReporter("worker", 0, interval=30.0)
    gaps = []
    for _ in range(7):
        gaps.append(rep.every())
        rep._reads += 1
    assert gaps == [2.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    # reads in the first minute of a task that prints nothing yet: at 0, 2, 6, 14, 30, 60
    at, reads = 0.0, 0
    rep = ProgressReporter("worker", 0, interval=30.0)
    while at < 60.0:
        reads += 1
        rep._reads += 1
        at += rep.every()
    assert reads == 5, reads
