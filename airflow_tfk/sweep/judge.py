"""The judge of a sweep: reads the running trials' progress and prunes the losers.

A thread of its own (:meth:`Judging._judge_loop`), beside the loop that starts trials and
ends finished ones, so that nothing slow on the loop (a trial's create, a finished trial's
results and delete) holds a pruning decision back: a pruned trial trains on, at full
speed, until its cluster is deleted. Each look at a trial reads the tail of its progress
log, reports only its newest point on the pruner's grid (:mod:`~airflow_tfk.sweep.curve`)
to Optuna - one write -, asks the pruner, and ends a loser at once through
:func:`~airflow_tfk.run.ending.end_run` (in :meth:`SweepRunner._end`), as a killed run's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_tfk.protocol.progress import last_progress, parse_line
from airflow_tfk.run.policies import Outcome, evaluate
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.curve import LossCurve

if TYPE_CHECKING:
    from airflow_tfk.backends.base import Backend
    from airflow_tfk.run.handle import ClusterHandle
    from airflow_tfk.sweep.config import SweepConfig

log = logging.getLogger(__name__)
#: Log lines read per look at a running trial: enough for every progress line since the
#: last look at the default intervals, few enough to stay cheap on the API server.
PROGRESS_TAIL_LINES = 200
#: Log lines read once a trial has finished, for its whole curve (a completed trial's
#: points are what running trials are compared with).
FINAL_TAIL_LINES = 5000


@dataclass
class _Trial:
    """A running trial: its Optuna trial, cluster and what its progress said so far."""

    trial: Any  # optuna.trial.Trial
    handle: ClusterHandle
    role: str
    index: int
    curve: LossCurve = field(default_factory=lambda: LossCurve(1.0))
    reported: dict[int, float] = field(default_factory=dict)  # grid points given to Optuna
    unwritten: tuple[int, float] | None = None  # the point a pruning was decided on
    started: float = field(default_factory=time.monotonic)
    # Only the judge reads progress while the trial runs; the loop takes the trial from
    # it under this lock, so a report never lands on a trial being ended.
    lock: threading.Lock = field(default_factory=threading.Lock)
    claimed_by: threading.Thread | None = None
    creating: threading.Thread | None = None  # the thread creating its cluster, until it returns
    read_at: float | None = None  # when the judge last read its progress (time.time())

    @property
    def number(self) -> int:
        return int(self.trial.number)

    @property
    def last_step(self) -> int:
        return self.curve.last_step


class Judging:
    """The judge's half of :class:`~airflow_tfk.sweep.runner.SweepRunner` (its attributes
    are the runner's)."""

    backend: Backend
    config: SweepConfig
    _running: dict[int, _Trial]
    _lock: threading.RLock
    _done: threading.Event
    _stopping: str | None
    _sign: float
    emit: Callable[[str], None]

    def _claim(self, run: _Trial) -> bool:
        raise NotImplementedError

    def _release(self, run: _Trial, *, unfinished: bool = False) -> None:
        raise NotImplementedError

    def _end(self, run: _Trial, reason: str) -> None:
        raise NotImplementedError

    def _curve(self) -> LossCurve:
        return LossCurve(self.config.smoothing, self._sign, self.config.pruner.interval_steps)

    def _logs(self, run: _Trial, lines: int) -> str:
        return self.backend.logs(run.handle.ref, run.role, run.index, tail_lines=lines)

    def _judge_loop(self, study: Any) -> None:
        """Until the sweep ends: look at every running trial's progress, prune the losers."""
        while not self._done.wait(self.config.poll_interval) and not self._stopping:
            with self._lock:
                runs = list(self._running.values())
            for run in runs:
                if self._done.is_set() or self._stopping:
                    return
                try:
                    self._judge(study, run)
                except Exception as exc:  # best effort: the loop and the status decide the rest
                    log.exception("sweep judge: trial %s", run.number)
                    self.emit(f"trial {run.number}: could not judge its progress: {exc}")

    def _judge(self, study: Any, run: _Trial) -> None:
        with run.lock:
            if run.number not in self._running:
                return
            step = self._report(study, run)
            # A trial that has trained to its end is the loop's to complete, not a loser.
            if step is None or run.curve.finished or not self._still_running(run):
                return
            if not self._claim(run):
                return
        try:
            self._prune(study, run, step)
        except BaseException:
            self._release(run, unfinished=True)  # the loop or stop() ends it
            raise
        self._release(run)

    def _report(self, study: Any, run: _Trial) -> int | None:
        """Read the trial's new progress lines and ask the pruner about its newest grid
        point; the step of the newest line when the pruner says to stop, or None.

        The pruner is asked before the point is written to the study: a write waits for
        the disk (fsync), seconds on a busy machine, and a loser trains on at full speed
        meanwhile. A pruned trial's point is written once its cluster is gone."""
        try:
            text = self._logs(run, PROGRESS_TAIL_LINES)
        except Exception:  # progress is best effort; the status decides
            return None
        run.read_at = time.time()
        if not run.curve.feed(map(parse_line, text.splitlines())):
            return None
        newest = run.curve.newest()
        if newest is None or newest[0] in run.reported:
            return None
        point, value = newest
        if _pruner_says(study, {**run.reported, point: value}):
            run.unwritten = (point, value)
            return run.last_step
        run.trial.report(value, point)
        run.reported[point] = value
        return None

    def _still_running(self, run: _Trial) -> bool:
        try:
            status = self.backend.status(run.handle.ref)
        except Exception:  # unknown: the loop looks again; pruning waits for the next point
            return False
        return evaluate(run.handle.mode, run.handle.replicas, status).outcome is Outcome.RUNNING

    def _report_curve(self, run: _Trial) -> None:
        """A finished trial's whole curve: every grid point not yet reported."""
        try:
            text = self._logs(run, FINAL_TAIL_LINES)
            # Read from the start: lines the judge skipped (it reads a tail) fill their points.
            curve = self._curve()
            curve.feed(map(parse_line, text.splitlines()))
        except Exception as exc:
            self.emit(f"trial {run.number}: could not read its progress: {exc}")
            curve = run.curve
        if curve.last_step >= run.curve.last_step:
            run.curve = curve
        # Points before the warm-up are never compared. All in one write: the judge's
        # decisions on the running trials read the study, and must not wait for a curve.
        warmup = self.config.pruner.n_warmup_steps
        todo = {p: v for p, v in run.curve.points().items() if p >= warmup and p not in run.reported}
        studies.report_points(run.trial, todo)
        run.reported.update(todo)

    def _prune(self, study: Any, run: _Trial, step: int) -> None:
        decided = time.time()
        lag = None if run.curve.last_time is None else max(0.0, decided - run.curve.last_time)
        smoothed = run.curve.smoothed
        reason = (
            f"pruned by the sweep at step {step}: loss {smoothed:.4g} is behind the finished trials"
            if smoothed is not None
            else f"pruned by the sweep at step {step}: no finite loss"
        )
        self.emit(f"trial {run.number}: {reason}")
        self._end(run, f"trial {run.number} {reason}")
        ended = time.time()
        if run.unwritten is not None:
            point, value = run.unwritten
            run.trial.report(value, point)
            run.reported[point] = value
        run.trial.set_user_attr(studies.PRUNED_AT, step)
        run.trial.set_user_attr(studies.STEPS, step)
        run.trial.set_user_attr(
            studies.PRUNING,
            {
                # how old the newest line was when the pruner was asked, how long the
                # judge took from reading it to the decision, how long the end took, and
                # the last step the trial reported before its cluster went
                "line_age_seconds": None if lag is None else round(lag, 3),
                "judge_seconds": None if run.read_at is None else round(decided - run.read_at, 3),
                "end_seconds": round(ended - decided, 3),
                "stopped_at_step": self._stopped_step(run),
            },
        )
        study.tell(run.trial, state=_state("PRUNED"))

    def _stopped_step(self, run: _Trial) -> int | None:
        """The last step in an ended trial's log, where its logs outlive it (local)."""
        try:
            text = self._logs(run, PROGRESS_TAIL_LINES)
        except Exception:
            return None
        p = last_progress(text)
        return None if p is None else p.step


def _state(name: str) -> Any:
    import optuna

    return optuna.trial.TrialState[name]


def _pruner_says(study: Any, values: dict[int, float]) -> bool:
    """The study's pruner on a running trial with these intermediate values (what
    ``trial.should_prune()`` asks once they are written; the median pruner reads only
    them and the study's completed trials)."""
    from optuna.trial import TrialState, create_trial

    return bool(study.pruner.prune(study, create_trial(state=TrialState.RUNNING, intermediate_values=values)))
