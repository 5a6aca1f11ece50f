"""Predictive deadlines: act when the progress says a run will miss its deadline, not after.

Each progress line the wait reads carries the step, the total and the time the loop
started, so it projects when the training ends (``Progress.eta_seconds``: the remaining
steps at the average rate so far). When that projection lies past the run's deadline (the
task's ``execution_timeout``, or the cluster's ``max_duration_seconds``, whichever comes
first) on two progress lines in a row, the forecast alerts once: a log line with the step,
the ETA, the projected end and by how much it misses, and the DAG's callback. One late line
alone is not enough: the first steps of a TensorFlow training are its slowest (graph
tracing, the first gRPC round trips), and an ETA taken there overshoots.

``deadline_action``:

- ``warn`` (default): the line and the callback; the run goes on (it may speed up);
- ``checkpoint_and_stop``: the wait also ends the run at once, as failed, naming the
  forecast. Its tasks are deleted with their grace, so each training task takes its notice
  (SIGTERM) and saves a checkpoint at the next step before it exits: a retry resumes from
  it, instead of a kill at the deadline losing the work since the last periodic one.

A run whose projection comes back before the deadline clears the alert (a line saying so),
and a later miss alerts again. Backend-agnostic, no Airflow import.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.protocol.progress import Progress
from airflow_tfk.run.policies import Outcome, Verdict
from airflow_tfk.spec.operator_options import DEADLINE_ACTIONS

log = logging.getLogger(__name__)
#: progress lines in a row whose projection must be late before the forecast alerts
CONFIRMING_LINES = 2


class ForecastAlert(Exception):
    """Raised by a forecast that hands its alert over (a deferred wait: the triggerer cannot
    run the DAG's callback, the resumed task does, then acts or waits again)."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(info)
        self.info = info


def _clock(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.UTC).strftime("%H:%M:%S UTC")


def _span(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


@dataclass
class DeadlineForecast:
    """Judges each new progress line against ``deadline`` (UNIX time).

    :param what: the deadline in words, e.g. ``the task's execution_timeout``.
    :param on_alert: called with :meth:`alert_info` when the forecast alerts.
    :param hand_over: raise :class:`ForecastAlert` instead of calling ``on_alert`` and
        acting (the trigger's wait; the task acts on the event).
    """

    deadline: float
    what: str
    action: str = "warn"
    emit: Callable[[str], None] = log.info
    on_alert: Callable[[dict[str, Any]], None] | None = None
    alerted: bool = False
    hand_over: bool = False
    _late_lines: int = field(default=0, init=False)
    _last_step: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.action not in DEADLINE_ACTIONS:
            raise ValueError(
                f"deadline_action: must be one of {', '.join(DEADLINE_ACTIONS)} (got {self.action!r})"
            )

    def observe(self, p: Progress | None) -> Verdict | None:
        """A verdict that ends the run (``checkpoint_and_stop``), else None."""
        if p is None or p.step == self._last_step or p.total_steps <= 0 or p.step >= p.total_steps:
            return None
        self._last_step = p.step
        eta = p.eta_seconds()
        if eta is None:
            return None
        ends = p.time + eta
        if ends <= self.deadline:
            self._late_lines = 0
            if self.alerted:
                self.alerted = False
                self.emit(
                    f"deadline forecast cleared: at step {p.step}/{p.total_steps} the training is "
                    f"projected to end at {_clock(ends)} (ETA {_span(eta)}), before {self.what} "
                    f"({_clock(self.deadline)})"
                )
            return None
        self._late_lines += 1
        if self.alerted or self._late_lines < CONFIRMING_LINES:
            return None
        self.alerted = True
        info = self.alert_info(p, eta, ends)
        stop = self.action == "checkpoint_and_stop"
        message = info["message"]
        if self.hand_over:
            self.emit(message)
            raise ForecastAlert(info)
        self.emit(
            message
            + (
                "; stopping it now with a checkpoint (deadline_action='checkpoint_and_stop')"
                if stop
                else "; it goes on (deadline_action='warn')"
            )
        )
        if self.on_alert is not None:
            try:
                self.on_alert(info)
            except Exception as exc:  # a callback's failure is the DAG's, not the wait's
                self.emit(f"the deadline forecast's callback failed: {type(exc).__name__}: {exc}")
        return stop_verdict(info) if stop else None

    def alert_info(self, p: Progress, eta: float, ends: float) -> dict[str, Any]:
        """What the callback gets: the step, total, ETA, projected end, deadline, action."""
        return {
            "step": p.step,
            "total_steps": p.total_steps,
            "eta_seconds": round(eta, 1),
            "projected_end": ends,
            "deadline": self.deadline,
            "late_seconds": round(ends - self.deadline, 1),
            "deadline_of": self.what,
            "action": self.action,
            "message": (
                f"deadline forecast: at step {p.step}/{p.total_steps} the training is projected to "
                f"end at {_clock(ends)} (ETA {_span(eta)}), {_span(ends - self.deadline)} after "
                f"{self.what} ({_clock(self.deadline)})"
            ),
        }

    # -- the trigger's state: a deferred wait forecasts in the triggerer ---------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "deadline": self.deadline,
            "what": self.what,
            "action": self.action,
            "alerted": self.alerted,
            "hand_over": self.hand_over,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], emit: Callable[[str], None] = log.info) -> DeadlineForecast:
        return cls(
            float(data["deadline"]),
            str(data["what"]),
            str(data.get("action", "warn")),
            emit,
            alerted=bool(data.get("alerted", False)),
            hand_over=bool(data.get("hand_over", False)),
        )


def stop_verdict(info: dict[str, Any]) -> Verdict:
    """The failed verdict of ``checkpoint_and_stop``, naming the forecast."""
    return Verdict(Outcome.FAILED, f"stopped before its deadline: {info['message']}")


def run_deadline(wait_deadline: float | None, cluster_deadline: float | None) -> tuple[float, str] | None:
    """The deadline a forecast judges against, and its name: the earlier of the task's
    ``execution_timeout`` and the cluster's ``max_duration_seconds``; None without either."""
    found = [
        (d, what)
        for d, what in (
            (wait_deadline, "the task's execution_timeout"),
            (cluster_deadline, "the cluster's max_duration_seconds"),
        )
        if d is not None
    ]
    return min(found) if found else None
