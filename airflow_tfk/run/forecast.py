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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

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


class _Judge:
    """What a deadline's and a budget's forecasts share: each new progress line, its ETA,
    late or not; after :attr:`CONFIRM` late lines in a row, one alert (a line, the
    callback, or the alert handed over), and the stop of ``checkpoint_and_stop``; a line
    that is no longer late clears the alert."""

    CONFIRM = 1
    ACTION_FIELD = ""
    action: str
    emit: Callable[[str], None]
    on_alert: Callable[[dict[str, Any]], None] | None
    alerted: bool
    hand_over: bool
    _late_lines: int
    _last_step: int | None

    def _check_action(self) -> None:
        if self.action not in DEADLINE_ACTIONS:
            raise ValueError(
                f"{self.ACTION_FIELD}: must be one of {', '.join(DEADLINE_ACTIONS)} (got {self.action!r})"
            )

    def observe(self, p: Progress | None) -> Verdict | None:
        """A verdict that ends the run (``checkpoint_and_stop``), else None."""
        if p is None or p.step == self._last_step or p.total_steps <= 0 or p.step >= p.total_steps:
            return None
        self._last_step = p.step
        eta = p.eta_seconds()
        if eta is None:
            return None
        if not self._late(p, eta):
            self._late_lines = 0
            if self.alerted:
                self.alerted = False
                self.emit(self._cleared(p, eta))
            return None
        self._late_lines += 1
        if self.alerted or self._late_lines < self.CONFIRM:
            return None
        self.alerted = True
        info = self._info(p, eta)
        message = info["message"]
        if self.hand_over:
            self.emit(message)
            raise ForecastAlert(info)
        stop = self.action == "checkpoint_and_stop"
        self.emit(
            message
            + (
                f"; stopping it now with a checkpoint ({self.ACTION_FIELD}='checkpoint_and_stop')"
                if stop
                else f"; it goes on ({self.ACTION_FIELD}='warn')"
            )
        )
        if self.on_alert is not None:
            try:
                self.on_alert(info)
            except Exception as exc:  # a callback's failure is the DAG's, not the wait's
                self.emit(f"the {info['kind']} forecast's callback failed: {type(exc).__name__}: {exc}")
        return stop_verdict(info) if stop else None

    def _late(self, p: Progress, eta: float) -> bool:
        raise NotImplementedError

    def _info(self, p: Progress, eta: float) -> dict[str, Any]:
        """What the callback gets (``kind``, ``action`` and ``message`` among it)."""
        raise NotImplementedError

    def _cleared(self, p: Progress, eta: float) -> str:
        raise NotImplementedError


@dataclass
class DeadlineForecast(_Judge):
    """Judges each new progress line against ``deadline`` (UNIX time).

    :param what: the deadline in words, e.g. ``the task's execution_timeout``.
    :param on_alert: called with the alert's details when the forecast alerts.
    :param hand_over: raise :class:`ForecastAlert` instead of calling ``on_alert`` and
        acting (the trigger's wait; the task acts on the event).
    """

    CONFIRM = CONFIRMING_LINES
    ACTION_FIELD = "deadline_action"

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
        self._check_action()

    def _late(self, p: Progress, eta: float) -> bool:
        return p.time + eta > self.deadline

    def _cleared(self, p: Progress, eta: float) -> str:
        return (
            f"deadline forecast cleared: at step {p.step}/{p.total_steps} the training is "
            f"projected to end at {_clock(p.time + eta)} (ETA {_span(eta)}), before {self.what} "
            f"({_clock(self.deadline)})"
        )

    def _info(self, p: Progress, eta: float) -> dict[str, Any]:
        """The step, total, ETA, projected end, deadline, lateness, action, message."""
        ends = p.time + eta
        return {
            "step": p.step,
            "total_steps": p.total_steps,
            "eta_seconds": round(eta, 1),
            "projected_end": ends,
            "deadline": self.deadline,
            "late_seconds": round(ends - self.deadline, 1),
            "deadline_of": self.what,
            "kind": "deadline",
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
            "kind": "deadline",
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
    before = "crossing its budget" if info.get("kind") == "budget" else "its deadline"
    return Verdict(Outcome.FAILED, f"stopped before {before}: {info['message']}")


Forecast = Union["DeadlineForecast", "BudgetForecast"]


def from_state(data: dict[str, Any], emit: Callable[[str], None] = log.info) -> Forecast:
    """A forecast from its ``to_dict()`` (a trigger's serialized state)."""
    if data.get("kind") == "budget":
        return BudgetForecast.from_dict(data, emit)
    return DeadlineForecast.from_dict(data, emit)


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


@dataclass
class BudgetForecast(_Judge):
    """Judges each new progress line against a budget (``budget:`` of the spec): what the
    cluster will have held at completion, projected as its hold per second (every task's
    requests, priced for a cost) times the time from the create to the progress's ETA.
    It acts on the first line whose projection crosses the cap, once; a run whose
    projection comes back under it clears the alert. Every task is taken to hold its
    requests from the create on: a projection from above while pods wait to start.

    :param rate: cap units (core-hours, or money) the cluster holds per second.
    :param since: when the cluster was created (UNIX time).
    """

    ACTION_FIELD = "budget.action"

    cap: float
    unit: str
    rate: float
    since: float
    action: str = "warn"
    emit: Callable[[str], None] = log.info
    alerted: bool = False
    hand_over: bool = False
    on_alert: Callable[[dict[str, Any]], None] | None = None
    _late_lines: int = field(default=0, init=False)
    _last_step: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._check_action()

    def _projected(self, p: Progress, eta: float) -> float:
        return self.rate * max(0.0, p.time + eta - self.since)

    def _late(self, p: Progress, eta: float) -> bool:
        return self._projected(p, eta) > self.cap

    def _cleared(self, p: Progress, eta: float) -> str:
        return (
            f"budget forecast cleared: at step {p.step}/{p.total_steps} the training is projected "
            f"to hold {self._projected(p, eta):.4g} {self.unit} at completion, within its budget of "
            f"{self.cap:g} {self.unit}"
        )

    def _info(self, p: Progress, eta: float) -> dict[str, Any]:
        projected = self._projected(p, eta)
        return {
            "step": p.step,
            "total_steps": p.total_steps,
            "eta_seconds": round(eta, 1),
            "projected": projected,
            "budget": self.cap,
            "unit": self.unit,
            "kind": "budget",
            "action": self.action,
            "message": (
                f"budget forecast: at step {p.step}/{p.total_steps} the training is projected to hold "
                f"{projected:.4g} {self.unit} at completion (ETA {_span(eta)}), over its budget of "
                f"{self.cap:g} {self.unit}"
            ),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "budget",
            "cap": self.cap,
            "unit": self.unit,
            "rate": self.rate,
            "since": self.since,
            "action": self.action,
            "alerted": self.alerted,
            "hand_over": self.hand_over,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], emit: Callable[[str], None] = log.info) -> BudgetForecast:
        return cls(
            float(data["cap"]),
            str(data["unit"]),
            float(data["rate"]),
            float(data["since"]),
            str(data.get("action", "warn")),
            emit,
            alerted=bool(data.get("alerted", False)),
            hand_over=bool(data.get("hand_over", False)),
        )


def budget_forecasts(
    budget: Any, hold: Mapping[str, float], prices: Any, since: float, emit: Callable[[str], None]
) -> list[BudgetForecast]:
    """The forecasts of a spec's ``budget`` (a ``BudgetSpec``): one per cap it sets.

    :param hold: what the whole cluster requests (``cpu`` cores, ``memory`` bytes, an
        accelerator resource in units), summed over its tasks.
    :param prices: a ``Prices`` table, or None (a ``cost`` cap then cannot be judged:
        the caller refuses it before the create).
    """
    from airflow_tfk.run.usage import TaskUsage, figures_of

    out = []
    if budget.core_hours is not None:
        rate = float(hold.get("cpu", 0.0)) / 3600.0
        out.append(BudgetForecast(float(budget.core_hours), "core-hours", rate, since, budget.action, emit))
    if budget.cost is not None and prices is not None:
        # what the whole cluster holds in one second, priced
        per_second = prices.cost(figures_of(TaskUsage("cluster", "", 1.0, dict(hold))))
        unit = prices.currency or "(priced)"
        out.append(BudgetForecast(float(budget.cost), unit, per_second, since, budget.action, emit))
    return out
