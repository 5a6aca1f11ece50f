"""Waiting on a cluster: status changes -> verdicts, log lines -> progress with ETA.

One wait loop for every way of waiting: :meth:`WaitLoop.plan` is driven by
:func:`wait_for_cluster` (the blocking operator), by ``WorkersDoneTrigger`` through
:func:`await_cluster` (deferrable operator and sensor), and the sensor's ``poke`` takes
one :meth:`WaitLoop.step` of it per poke. :func:`wait_result` and :func:`failure_of`
are the one translation of a verdict into the trigger event and of that into the task's
outcome. Backend-agnostic; no Airflow import at module level, so the worker and the
triggerer share it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_tfk._plan_driver import PlanIO, afinish, finish
from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.constants import PROGRESS_INTERVAL_SECONDS as DEFAULT_PROGRESS_INTERVAL
from airflow_tfk.policies import Outcome, Verdict, evaluate
from airflow_tfk.protocol.progress import Progress, last_progress
from airflow_tfk.spec import Mode
from airflow_tfk.stall import DEFAULT_STALL_SECONDS, ProgressStall, StallDetector, running_tasks
from airflow_tfk.status import Activity, ClusterStatus, Phase, TaskStatus

log = logging.getLogger(__name__)

#: The longest a single watch request of the loop stays open; the loop then starts another.
WATCH_WINDOW_SECONDS = 60.0
#: A queued cluster has no pod, so its pod watch sees no change: while it waits, the watch
#: window ends when Kueue's reason is due again (never shorter than this).
MIN_WATCH_WINDOW_SECONDS = 1.0
#: Kueue's first answer: read again this soon, this many times, until there is one.
QUEUE_QUICK_READ_SECONDS = 5.0
QUEUE_QUICK_READS = 3
#: Why a wait ended at the task's execution_timeout: the same words blocking and deferred.
TIMEOUT_MESSAGE = "the training exceeded the task's execution_timeout"
#: A summary line whose only news is a count comes at most this often.
SUMMARY_INTERVAL_SECONDS = 5.0
_monotonic = time.monotonic  # tests move the clock of the summary lines


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def format_progress(p: Progress) -> str:
    """``step 120/1000 (12.0%), loss 0.3100, elapsed 0:00:12, ETA 0:01:28``."""
    loss = f", loss {p.loss:.4f}" if p.loss is not None else ""
    return (
        f"step {p.step}/{p.total_steps} ({100 * p.fraction:.1f}%){loss}, "
        f"elapsed {format_duration(p.time - p.start_time)}, ETA {format_duration(p.eta_seconds())}"
    )


def progress_task(mode: Mode, replicas: dict[str, int]) -> tuple[str, int]:
    """Whose log carries the progress: the chief when there is one, else worker 0."""
    if Mode(mode) is Mode.PARAMETER_SERVER or "chief" in replicas:
        return "chief", 0
    return "worker", 0


@dataclass
class ProgressReporter:
    """Reads the newest progress line of one task, at most every ``interval`` seconds.

    Reading logs costs an API request on Kubernetes, so it is rate-limited; an unchanged
    step is not logged again. Until the task has printed its first progress line the log
    is read every ``first_interval`` seconds instead, so the first line shows within the
    first interval rather than one whole interval after a read that came too early.
    """

    backend: Backend
    ref: ClusterRef
    role: str
    index: int
    interval: float = DEFAULT_PROGRESS_INTERVAL
    emit: Callable[[str], None] = log.info
    first_interval: float = 2.0
    _last_read: float = float("-inf")
    _last_step: int | None = None

    def due(self, now: float | None = None) -> bool:
        interval = self.interval if self._last_step is not None else min(self.interval, self.first_interval)
        return (time.monotonic() if now is None else now) - self._last_read >= interval

    def report(self, text: str | None = None) -> Progress | None:
        """Parse ``text`` (or fetch the task's log tail) and emit a progress line if it moved."""
        self._last_read = time.monotonic()
        if text is None:
            try:
                text = self.backend.logs(self.ref, self.role, self.index, tail_lines=50)
            except Exception as exc:  # progress is best effort; the status watch decides
                log.debug("cannot read progress of %s-%s: %s", self.role, self.index, exc)
                return None
        p = last_progress(text)
        if p is not None and p.step != self._last_step:
            self._last_step = p.step
            self.emit(f"[{self.role}-{self.index}] {format_progress(p)}")
        return p


@dataclass
class QueueReporter:
    """While nothing of a cluster has started, say why: Kueue's pending reason (a queued
    cluster has no pod at all). Asked at most every ``interval`` seconds; logged when it
    changes."""

    backend: Backend
    ref: ClusterRef
    interval: float = 30.0
    emit: Callable[[str], None] = log.info
    _last_read: float = float("-inf")
    _last: str | None = None
    _unanswered: int = 0

    @staticmethod
    def waiting(status: ClusterStatus) -> bool:
        """Nothing has started yet: every task pending (e.g. its Job suspended by Kueue)."""
        return status.exists and all(t.phase is Phase.PENDING for t in status.tasks)

    def every(self) -> float:
        """Seconds between reads. Right after the create, Kueue has usually not looked at
        the Workload yet (no answer): the first few reads come sooner."""
        if self._last is None and self._unanswered < QUEUE_QUICK_READS:
            return min(self.interval, QUEUE_QUICK_READ_SECONDS)
        return self.interval

    def due_in(self) -> float:
        return max(0.0, self._last_read + self.every() - time.monotonic())

    def wants(self, status: ClusterStatus) -> bool:
        """Whether :meth:`report` should run for ``status`` now: nothing has started yet,
        and a read is due."""
        return self.waiting(status) and self.due_in() <= 0

    def report(self) -> str | None:
        self._last_read = time.monotonic()
        message = self.backend.queue_message(self.ref)
        if message and message != self._last:
            self.emit(f"queued: {message}")
        self._unanswered = 0 if message else self._unanswered + 1
        self._last = message
        return message


# -- the one wait loop ------------------------------------------------------------------------
@dataclass(frozen=True)
class Watch:
    """Start watching the cluster for ``seconds``; then :data:`NEXT_STATUS` until None."""

    seconds: float


@dataclass(frozen=True)
class NextStatus:
    """The watch's next status; answered with it, or None when the watch ended."""


@dataclass(frozen=True)
class ReadProgress:
    """Read the progress task's log (blocking I/O: in a thread when async)."""


@dataclass(frozen=True)
class ReadQueue:
    """Ask why the cluster is still queued (blocking I/O: in a thread when async)."""


@dataclass(frozen=True)
class JudgeStall:
    """The progress stood still past the bound: ask the backend for each running task's
    life signs and answer the failure that names the silent ones (blocking I/O)."""

    status: ClusterStatus


NEXT_STATUS = NextStatus()
READ_PROGRESS = ReadProgress()
READ_QUEUE = ReadQueue()
WaitOp = Watch | NextStatus | ReadProgress | ReadQueue | JudgeStall
# Sent back: the next status (or None) for NEXT_STATUS, the verdict for a JudgeStall.
WaitPlan = Generator[WaitOp, Any, Verdict]


@dataclass
class WaitLoop:
    """Wait until the training succeeds or fails, or ``deadline`` (UNIX time) passes.

    Logs a one-line summary when it changes and the progress task's step/ETA at most every
    ``progress_interval`` seconds. A deadline that passes is ``Outcome.RUNNING`` with
    ``timeout_message``. A training whose progress stands still for ``stall_seconds``
    while its tasks run fails as stalled (see :mod:`airflow_tfk.stall`); 0 turns that off.
    """

    backend: Backend
    ref: ClusterRef
    mode: Mode
    replicas: dict[str, int]
    deadline: float | None = None
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL
    emit: Callable[[str], None] = log.info
    timeout_message: str = TIMEOUT_MESSAGE
    stall_seconds: float = DEFAULT_STALL_SECONDS
    max_lost_workers: int = 0
    reporter: ProgressReporter = field(init=False)
    queue: QueueReporter = field(init=False)
    stalls: StallDetector = field(init=False)
    progress: ProgressStall = field(init=False)
    _summary: str = field(default="", init=False)
    _phases: frozenset[tuple[str, Phase]] = field(default=frozenset(), init=False)
    _summary_at: float = field(default=0.0, init=False)  # monotonic time of the last summary line
    _waiting: bool = field(default=False, init=False)  # the last status: nothing started yet
    _window_end: float = field(default=0.0, init=False)  # monotonic end of the current watch

    def __post_init__(self) -> None:
        self.stalls = StallDetector(self.mode, self.replicas, self.stall_seconds or float("inf"))
        role, index = progress_task(self.mode, self.replicas)
        self.progress = ProgressStall((role, index), self.stall_seconds)
        self.reporter = ProgressReporter(
            self.backend, self.ref, role, index, self.progress_interval, self.emit
        )
        self.queue = QueueReporter(self.backend, self.ref, min(self.progress_interval, 60.0), self.emit)

    def window(self) -> float:
        window = WATCH_WINDOW_SECONDS
        if self._waiting:  # no pod event will come: end the window when the queue is due
            window = min(window, max(MIN_WATCH_WINDOW_SECONDS, self.queue.due_in()))
        if self.deadline is None:
            return window
        return max(0.0, min(window, self.deadline - time.time()))

    def _rewatch_for_queue(self) -> bool:
        """A cluster found queued during a long watch window: end the window now, so the
        next one ends when Kueue's reason is due (no pod event would end it sooner)."""
        left = self._window_end - time.monotonic()
        return self._waiting and left > self.queue.due_in() + MIN_WATCH_WINDOW_SECONDS

    def timed_out(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    def step(self, status: ClusterStatus) -> Verdict:
        """Log what changed and judge one status."""
        verdict = evaluate(self.mode, self.replicas, status, self.max_lost_workers)
        self._log_summary(status, final=verdict.outcome is not Outcome.RUNNING)
        for warning in self.stalls.observe(status):
            self.emit(warning)
        verdict = self.stalls.blame(verdict)
        if verdict.outcome is Outcome.RUNNING and (standstill := self.progress.warning(status)):
            self.emit(standstill)
        return verdict

    def _log_summary(self, status: ClusterStatus, final: bool) -> None:
        """A summary line when a role enters or leaves a phase, and for the verdict's
        status; counts alone move the line at most every SUMMARY_INTERVAL_SECONDS, so
        600 workers starting one by one write a few lines, not 1,200."""
        summary = status.summary()
        if summary == self._summary:
            return
        phases = status.phases()
        now = _monotonic()
        if final or phases != self._phases or now - self._summary_at >= SUMMARY_INTERVAL_SECONDS:
            self.emit(f"cluster: {summary}")
            self._summary, self._phases, self._summary_at = summary, phases, now

    def read_progress(self) -> Progress | None:
        """Read the progress task's newest line (blocking), and note whether it moved."""
        p = self.reporter.report()
        self.progress.saw(p)
        return p

    def judge_stall(self, status: ClusterStatus) -> Verdict:
        """The failure of a training whose progress stood still (blocking: asks the backend
        for each running task's activity, a log read per task on Kubernetes)."""
        activity: dict[str, Activity] = {}
        for t in running_tasks(status):
            try:
                activity[t.name] = self.backend.task_activity(self.ref, t.role, t.index)
            except Exception as exc:  # best effort: the failure is reported either way
                log.debug("cannot read the activity of %s: %s", t.name, exc)
                activity[t.name] = Activity()
        return self.progress.verdict(status, activity, time.time())

    def plan(self) -> WaitPlan:
        """The loop itself, for a driver to run (see :func:`wait_for_cluster`)."""
        while True:
            window = self.window()
            self._window_end = time.monotonic() + window
            yield Watch(window)
            while (status := (yield NEXT_STATUS)) is not None:
                verdict = self.step(status)
                if verdict.outcome is Outcome.RUNNING and self.progress.stalled(status):
                    verdict = yield JudgeStall(status)
                self._waiting = self.queue.waiting(status)
                if verdict.outcome is not Outcome.RUNNING:
                    yield READ_PROGRESS
                    return verdict
                if self.queue.wants(status):
                    yield READ_QUEUE
                if self.reporter.due():
                    yield READ_PROGRESS
                if self.timed_out() or self._rewatch_for_queue():
                    break
            if self.timed_out():
                return Verdict(Outcome.RUNNING, self.timeout_message)


def wait_for_cluster(
    backend: Backend,
    ref: ClusterRef,
    mode: Mode,
    replicas: dict[str, int],
    timeout: float | None = None,
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
    emit: Callable[[str], None] = log.info,
    stall_seconds: float = DEFAULT_STALL_SECONDS,
    max_lost_workers: int = 0,
) -> Verdict:
    """Block until the training succeeds or fails, or ``timeout`` seconds pass.

    Returns a :class:`Verdict`; a timeout is ``Outcome.RUNNING`` with a message.
    """
    loop = WaitLoop(
        backend,
        ref,
        mode,
        replicas,
        deadline=None if timeout is None else time.time() + timeout,
        progress_interval=progress_interval,
        emit=emit,
        timeout_message=f"still running after {timeout or 0:.0f} s",
        stall_seconds=stall_seconds,
        max_lost_workers=max_lost_workers,
    )
    return finish(loop.plan(), _BlockingIO(loop))


async def await_cluster(loop: WaitLoop) -> Verdict:
    """:func:`wait_for_cluster`'s loop in the triggerer: the backend's async watch, and
    the log reads of progress in a thread."""
    return await afinish(loop.plan(), _TriggererIO(loop))


class _WaitIO(PlanIO):
    """What the wait loop's operations do (see :mod:`airflow_tfk._plan_driver`)."""

    OPS = {
        Watch: "watch",
        NextStatus: "next_status",
        ReadProgress: "read_progress",
        ReadQueue: "read_queue",
        JudgeStall: "judge_stall",
    }

    def __init__(self, loop: WaitLoop) -> None:
        self.loop = loop
        self.statuses: Any = None  # the current watch of the backend


class _BlockingIO(_WaitIO):
    """In the worker (blocking operator): the backend's watch, log reads in this thread."""

    def watch(self, op: Watch) -> None:
        self.close()
        self.statuses = iter(self.loop.backend.watch(self.loop.ref, timeout=op.seconds))

    def next_status(self, _: NextStatus) -> ClusterStatus | None:
        return None if self.statuses is None else next(self.statuses, None)

    def read_progress(self, _: ReadProgress) -> None:
        self.loop.read_progress()

    def read_queue(self, _: ReadQueue) -> None:
        self.loop.queue.report()

    def judge_stall(self, op: JudgeStall) -> Verdict:
        return self.loop.judge_stall(op.status)

    def close(self) -> None:
        statuses, self.statuses = self.statuses, None
        close = getattr(statuses, "close", None)  # a backend may return a plain iterable
        if close is not None:
            close()


class _TriggererIO(_WaitIO):
    """In the triggerer: the backend's async watch; the blocking log reads in a thread so
    the event loop of every other trigger keeps running."""

    async def watch(self, op: Watch) -> None:
        await self.aclose()
        self.statuses = aiter(self.loop.backend.awatch(self.loop.ref, timeout=op.seconds))

    async def next_status(self, _: NextStatus) -> ClusterStatus | None:
        return None if self.statuses is None else await anext(self.statuses, None)

    async def read_progress(self, _: ReadProgress) -> None:
        await asyncio.to_thread(self.loop.read_progress)

    async def read_queue(self, _: ReadQueue) -> None:
        await asyncio.to_thread(self.loop.queue.report)

    async def judge_stall(self, op: JudgeStall) -> Verdict:
        return await asyncio.to_thread(self.loop.judge_stall, op.status)

    async def aclose(self) -> None:
        statuses, self.statuses = self.statuses, None
        aclose = getattr(statuses, "aclose", None)
        if aclose is not None:
            await aclose()


# -- the one translation of a wait's end -------------------------------------------------------
WaitStatus = Literal["success", "failed", "timeout", "error"]


def wait_result(verdict: Verdict) -> dict[str, Any]:
    """A finished wait as the trigger's event payload (without the cluster):
    ``status`` (``success`` | ``failed`` | ``timeout``), ``message``, ``failed_task``."""
    status: WaitStatus = "timeout"  # still running when the loop gave up
    if verdict.outcome is Outcome.SUCCEEDED:
        status = "success"
    elif verdict.outcome is Outcome.FAILED:
        status = "failed"
    failed = verdict.failed_task.to_dict() if verdict.failed_task else None
    return {"status": status, "message": verdict.message, "failed_task": failed}


def failure_of(result: dict[str, Any], cluster_name: str) -> BaseException | None:
    """The exception a task raises for a wait result (a trigger event or
    :func:`wait_result`), or None for success: the task's own ``TrainingFailed`` for a
    failed task, ``TrainingFailed(<cluster>, "Deleted")`` for a cluster that vanished,
    ``AirflowTaskTimeout`` past the deadline."""
    from airflow_tfk.errors import TrainingFailed

    status = str(result.get("status") or "error")
    message = str(result.get("message", ""))
    if status == "success":
        return None
    if status == "timeout":
        from airflow_tfk._airflow import AirflowTaskTimeout

        return AirflowTaskTimeout(f"cluster {cluster_name}: {message}")
    failed = result.get("failed_task")
    if failed:
        task = TaskStatus.from_dict(failed)
        return TrainingFailed(task.name, task.reason or "Error", message)
    return TrainingFailed(cluster_name, "Deleted" if status == "failed" else status, message)
