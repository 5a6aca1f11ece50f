"""Waiting on a training: one async loop, for every way of waiting.

:meth:`Wait.run` is the loop: the statuses of the backend's watcher
(:class:`~airflow_tfk.backends.base.ClusterWatcher`), each judged by the success policy,
a summary line when the picture changes, the progress task's step/ETA, Kueue's reason
while the cluster is queued, and the stall bounds. ``TFClusterDoneTrigger`` awaits it in
the triggerer; the blocking operator runs the same coroutine with :func:`asyncio.run`
(:func:`wait_for_cluster`); a sensor's poke judges one status with the same
:meth:`Wait.check` (:meth:`Wait.poke`). :func:`wait_result` and :func:`failure_of` are
the one translation of a verdict into the trigger event and of that into the task's
outcome. Backend-agnostic; no Airflow import at module level, so the worker and the
triggerer share it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from airflow_tfk.backends.base import Backend, ClusterRef, ClusterWatcher
from airflow_tfk.core.constants import PROGRESS_INTERVAL_SECONDS as DEFAULT_PROGRESS_INTERVAL
from airflow_tfk.core.status import Activity, ClusterStatus, Phase, TaskStatus
from airflow_tfk.protocol.progress import Progress, last_progress
from airflow_tfk.run.forecast import Forecast
from airflow_tfk.run.policies import Outcome, Verdict, evaluate
from airflow_tfk.run.stall import ProgressStall, StallDetector, running_tasks
from airflow_tfk.spec.cluster import Mode
from airflow_tfk.spec.operator_options import default_stall_seconds

if TYPE_CHECKING:
    from airflow_tfk.run.handle import ClusterHandle

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The longest the loop sleeps when nothing changes and nothing is due: it then judges the
#: last status again (a deadline of the cluster's own may have passed).
WAKE_SECONDS_MAX = 60.0
#: The shortest: a read that is due keeps being due until it is done.
WAKE_SECONDS_MIN = 0.05
#: Kueue's first answer: read again this soon, this many times, until there is one.
QUEUE_QUICK_READ_SECONDS = 5.0
QUEUE_QUICK_READS = 3
#: Why a wait ended at the task's execution_timeout: the same words blocking and deferred.
TIMEOUT_MESSAGE = "the training exceeded the task's execution_timeout"
#: A progress read that keeps finding the same step backs off to this many intervals.
STILL_BACKOFF = 4
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
    """When to read the newest progress line of one task, and what to say about it.

    Reading logs costs an API request on Kubernetes, so it is rate-limited to one per
    ``interval``; an unchanged step is not logged again. Until the task has printed its
    first progress line (the wait reads only once the task runs) the reads come sooner:
    ``first_interval`` after the first, then twice as long after each read that found no
    line, up to ``interval`` (2, 4, 8, 16 s...): the first line shows within about as long
    again as the task took to print it, rather than one whole interval after a read that
    came too early, and a slow start-up (TensorFlow's import) costs a few reads, not one
    every 2 s. A step that stands still
    (or a task that prints no progress) is read less and less often, up to
    ``STILL_BACKOFF`` intervals apart: a triggerer waits on hundreds of trainings, and a
    read that finds nothing new is a request per training for nothing.
    """

    role: str
    index: int
    interval: float = DEFAULT_PROGRESS_INTERVAL
    emit: Callable[[str], None] = log.info
    first_interval: float = 2.0
    _last_read: float = float("-inf")
    _last_step: int | None = None
    _reads: int = 0
    _still: int = 0  # reads in a row that found no new step

    def every(self) -> float:
        """Seconds between reads, as the last reads found the progress moving or not."""
        if self._last_step is None:
            return min(self.interval, self.first_interval * 2 ** max(0, self._reads - 1))
        return self.interval * min(STILL_BACKOFF, 2 ** max(0, self._still - 1))

    def due_in(self) -> float:
        return self._last_read + self.every() - time.monotonic()

    def due(self) -> bool:
        return self.due_in() <= 0

    async def read(self, watcher: ClusterWatcher) -> Progress | None:
        """Read the task's log tail and emit a progress line if the step moved."""
        self._last_read = time.monotonic()
        self._reads += 1
        self._still += 1
        try:
            text = await watcher.logs(self.role, self.index, tail_lines=50)
        except Exception as exc:  # progress is best effort; the status decides
            log.debug("cannot read progress of %s-%s: %s", self.role, self.index, exc)
            return None
        p = last_progress(text)
        if p is not None and p.step != self._last_step:
            self._last_step = p.step
            self._still = 0
            self.emit(f"[{self.role}-{self.index}] {format_progress(p)}")
        return p


@dataclass
class QueueReporter:
    """While nothing of a cluster has started, say why: Kueue's pending reason (a queued
    cluster has no pod at all). Asked at most every ``interval`` seconds; logged when it
    changes."""

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
        """Whether :meth:`read` should run for ``status`` now: nothing has started yet,
        and a read is due."""
        return self.waiting(status) and self.due_in() <= 0

    async def read(self, watcher: ClusterWatcher) -> str | None:
        self._last_read = time.monotonic()
        message = await watcher.queue_message()
        if message and message != self._last:
            self.emit(f"queued: {message}")
        self._unanswered = 0 if message else self._unanswered + 1
        self._last = message
        return message


# -- the one wait -----------------------------------------------------------------------------
@dataclass
class Wait:
    """Wait until the training succeeds or fails, or ``deadline`` (UNIX time) passes.

    Logs a one-line summary when it changes and the progress task's step/ETA at most every
    ``progress_interval`` seconds. A deadline that passes is ``Outcome.RUNNING`` with
    ``timeout_message``. A training whose progress stands still for ``stall_seconds``
    while its tasks run fails as stalled (see :mod:`airflow_tfk.run.stall`); 0 turns that off.
    """

    backend: Backend
    ref: ClusterRef
    mode: Mode
    replicas: dict[str, int]
    deadline: float | None = None
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL
    emit: Callable[[str], None] = log.info
    timeout_message: str = TIMEOUT_MESSAGE
    # None: the default, which follows progress_interval (default_stall_seconds)
    stall_seconds: float | None = None
    max_lost_workers: int = 0
    #: judge each new progress line against the run's deadline and budget
    forecasts: tuple[Forecast, ...] = ()
    reporter: ProgressReporter = field(init=False)
    queue: QueueReporter = field(init=False)
    stalls: StallDetector = field(init=False)
    progress: ProgressStall = field(init=False)
    _summary: str = field(default="", init=False)
    _phases: frozenset[tuple[str, Phase]] = field(default=frozenset(), init=False)
    _summary_at: float = field(default=0.0, init=False)  # monotonic time of the last summary line
    _waiting: bool = field(default=False, init=False)  # the last status: nothing started yet
    #: the last status: the progress task has run (a log to read); reads wait for it
    _progress_started: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if self.stall_seconds is None:
            self.stall_seconds = default_stall_seconds(self.progress_interval)
        self.stalls = StallDetector(self.mode, self.replicas, self.stall_seconds or float("inf"))
        role, index = progress_task(self.mode, self.replicas)
        self.progress = ProgressStall((role, index), self.stall_seconds)
        self.reporter = ProgressReporter(role, index, self.progress_interval, self.emit)
        self.queue = QueueReporter(min(self.progress_interval, 60.0), self.emit)

    @classmethod
    def of_handle(cls, handle: ClusterHandle, backend: Backend, **options: Any) -> Wait:
        """The wait on a handle's cluster, with its shape and its bound on lost workers."""
        return cls(
            backend,
            handle.ref,
            handle.mode,
            handle.replicas,
            max_lost_workers=handle.max_lost_workers,
            **options,
        )

    async def run(self) -> Verdict:
        """The loop: judge every status as it changes, and the last one again whenever a
        read or a bound comes due while nothing changes."""
        async with self.backend.watcher(self.ref) as watcher:
            status: ClusterStatus | None = None
            while not self.timed_out():
                status = await watcher.next(self.wake_in(status is not None)) or status
                if status is not None:
                    verdict = await self.check(watcher, status)
                    if verdict.outcome is not Outcome.RUNNING:
                        return verdict
            return Verdict(Outcome.RUNNING, self.timeout_message)

    async def poke(self) -> Verdict:
        """One status, judged as :meth:`run` judges each (a sensor's poke)."""
        async with self.backend.watcher(self.ref) as watcher:
            return await self.check(watcher, await watcher.status())

    async def check(self, watcher: ClusterWatcher, status: ClusterStatus) -> Verdict:
        """Judge one status, and do the reads that are due: the stall's life signs, the
        last progress line before a verdict, Kueue's reason, the progress line."""
        verdict = self.step(status)
        if verdict.outcome is Outcome.RUNNING and self.progress.stalled(status):
            verdict = await self.judge_stall(watcher, status)
        self._waiting = self.queue.waiting(status)
        self._progress_started = self._progress_started or self._started(status)
        if verdict.outcome is not Outcome.RUNNING:
            await self.read_progress(watcher)
            return verdict
        if self.queue.wants(status):
            await self.queue.read(watcher)
        if self._progress_started and self.reporter.due():
            p = await self.read_progress(watcher)
            for forecast in self.forecasts:
                if (stop := forecast.observe(p)) is not None:
                    return stop
        return verdict

    def wake_in(self, seen: bool) -> float:
        """Seconds until the loop must look again though nothing changed: a read or a
        stall bound comes due, or the deadline passes."""
        due = [WAKE_SECONDS_MAX]
        if seen and self._progress_started:  # the reads wait for the progress task to run
            due.append(self.reporter.due_in())
        if seen and self._waiting:
            due.append(self.queue.due_in())
        due += [d for d in (self.stalls.due_in(), self.progress.due_in()) if d is not None]
        if self.deadline is not None:
            due.append(self.deadline - time.time())
        return max(WAKE_SECONDS_MIN, min(due))

    def _started(self, status: ClusterStatus) -> bool:
        """The progress task runs or has run: its log has lines to read. Until then a read
        finds nothing (and costs a request per training on Kubernetes); its quick first
        reads are kept for when it runs."""
        task = status.task(self.reporter.role, self.reporter.index)
        return task is not None and (task.phase is not Phase.PENDING or task.restarts > 0)

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

    async def read_progress(self, watcher: ClusterWatcher) -> Progress | None:
        """Read the progress task's newest line, and note whether it moved."""
        p = await self.reporter.read(watcher)
        self.progress.saw(p)
        return p

    async def judge_stall(self, watcher: ClusterWatcher, status: ClusterStatus) -> Verdict:
        """The failure of a training whose progress stood still, naming the silent tasks
        from each running task's life signs (a log read per task on Kubernetes)."""
        activity: dict[str, Activity] = {}
        for t in running_tasks(status):
            try:
                activity[t.name] = await watcher.task_activity(t.role, t.index)
            except Exception as exc:  # best effort: the failure is reported either way
                log.debug("cannot read the activity of %s: %s", t.name, exc)
                activity[t.name] = Activity()
        return self.progress.verdict(status, activity, time.time())


def wait_for_cluster(
    backend: Backend,
    ref: ClusterRef,
    mode: Mode,
    replicas: dict[str, int],
    timeout: float | None = None,
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
    emit: Callable[[str], None] = log.info,
    stall_seconds: float | None = None,
    max_lost_workers: int = 0,
) -> Verdict:
    """Block until the training succeeds or fails, or ``timeout`` seconds pass: the
    trigger's :meth:`Wait.run`, on an event loop of this thread's own.

    Returns a :class:`Verdict`; a timeout is ``Outcome.RUNNING`` with a message.
    """
    wait = Wait(
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
    return run_blocking(wait.run())


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine of the wait to its end on an event loop of this thread's own (the
    blocking operator, a sensor's poke)."""
    return asyncio.run(_raising_escapes(coro))


async def _raising_escapes(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro``, ending it with a BaseException that escapes one of the loop's callbacks.

    A signal handler raises in whatever code runs when the signal comes: Airflow's
    ``execution_timeout`` raises AirflowTaskTimeout from SIGALRM. In a coroutine that ends
    the wait as it would end blocking code; in a callback of the loop itself the loop would
    log it and go on, and the wait would outlive the task's timeout.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    escaped: list[BaseException] = []

    def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, BaseException) and not isinstance(exc, Exception) and task is not None:
            escaped.append(exc)
            task.cancel()
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(on_error)
    try:
        return await coro
    except asyncio.CancelledError:
        if escaped:
            raise escaped[0] from None
        raise


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
    ``WaitTimedOut`` past the deadline (the
    Airflow face raises it as ``AirflowTaskTimeout``)."""
    from airflow_tfk.core.errors import TrainingFailed

    status = str(result.get("status") or "error")
    message = str(result.get("message", ""))
    if status == "success":
        return None
    if status == "timeout":
        from airflow_tfk.core.errors import WaitTimedOut

        return WaitTimedOut(f"cluster {cluster_name}: {message}")
    failed = result.get("failed_task")
    if failed:
        task = TaskStatus.from_dict(failed)
        return TrainingFailed(task.name, task.reason or "Error", message)
    return TrainingFailed(cluster_name, "Deleted" if status == "failed" else status, message)
