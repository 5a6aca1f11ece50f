"""Waiting on a cluster: status changes -> verdicts, log lines -> progress with ETA.

Backend-agnostic; used by the blocking sensor/operator path and by the trigger. No
Airflow import here, so both the worker and the triggerer share it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.policies import Outcome, Verdict, evaluate
from airflow_tfk.protocol.progress import Progress, last_progress
from airflow_tfk.spec import Mode
from airflow_tfk.status import ClusterStatus, Phase

log = logging.getLogger(__name__)


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
    step is not logged again.
    """

    backend: Backend
    ref: ClusterRef
    role: str
    index: int
    interval: float = 30.0
    emit: Callable[[str], None] = log.info
    _last_read: float = float("-inf")
    _last_step: int | None = None

    def due(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) - self._last_read >= self.interval

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

    def wants(self, status: ClusterStatus) -> bool:
        """Whether :meth:`report` should run for ``status`` now: nothing has started yet
        (every task pending, e.g. its Job suspended by Kueue), and it is due."""
        waiting = status.exists and all(t.phase is Phase.PENDING for t in status.tasks)
        return waiting and time.monotonic() - self._last_read >= self.interval

    def report(self) -> str | None:
        self._last_read = time.monotonic()
        message = self.backend.queue_message(self.ref)
        if message and message != self._last:
            self.emit(f"queued: {message}")
        self._last = message
        return message


def wait_for_cluster(
    backend: Backend,
    ref: ClusterRef,
    mode: Mode,
    replicas: dict[str, int],
    timeout: float | None = None,
    progress_interval: float = 30.0,
    emit: Callable[[str], None] = log.info,
) -> Verdict:
    """Block until the training succeeds or fails, or ``timeout`` seconds pass.

    Returns a :class:`Verdict`; a timeout is ``Outcome.RUNNING`` with a message.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    role, index = progress_task(mode, replicas)
    reporter = ProgressReporter(backend, ref, role, index, progress_interval, emit)
    queue = QueueReporter(backend, ref, min(progress_interval, 60.0), emit)
    last_summary = ""
    while True:
        window = 60.0 if deadline is None else max(0.0, min(60.0, deadline - time.monotonic()))
        for status in backend.watch(ref, timeout=window):
            last_summary = _log_summary(status, last_summary, emit)
            if queue.wants(status):
                queue.report()
            verdict = evaluate(mode, replicas, status)
            if verdict.outcome is not Outcome.RUNNING:
                reporter.report()
                return verdict
            if reporter.due():
                reporter.report()
            if deadline is not None and time.monotonic() >= deadline:
                break
        if deadline is not None and time.monotonic() >= deadline:
            return Verdict(Outcome.RUNNING, f"still running after {timeout:.0f} s")


def _log_summary(status: ClusterStatus, last: str, emit: Callable[[str], None]) -> str:
    summary = status.summary()
    if summary != last:
        emit(f"cluster: {summary}")
    return summary
