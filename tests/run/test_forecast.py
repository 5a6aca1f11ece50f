"""The deadline forecast on progress lines: alerts once the projection is late on two
lines in a row, clears when the run speeds up, stops with ``checkpoint_and_stop``, and a
deferred wait hands the alert over."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.protocol.progress import Progress
from airflow_tfk.run.forecast import BudgetForecast, DeadlineForecast, ForecastAlert, from_state, run_deadline
from airflow_tfk.run.policies import Outcome
from airflow_tfk.spec.operator_options import forecast_arg

START = 1_000_000.0


def line(step: int, seconds: float, total: int = 1000) -> Progress:
    """Step ``step`` reached ``seconds`` after the loop started."""
    return Progress(step, total, 0.1, START, START + seconds)


def forecast(action: str = "warn", deadline: float = 60.0, **kw) -> tuple[DeadlineForecast, list, list]:
    lines: list[str] = []
    alerts: list[dict] = []
    f = DeadlineForecast(
        START + deadline, "the task's execution_timeout", action, lines.append, alerts.append, **kw
    )
    return f, lines, alerts


def test_two_late_lines_in_a_row_alert_once_with_the_step_and_eta():
    f, lines, alerts = forecast()
    # 1 step per 0.12 s: 1000 steps end at 120 s, past the 60 s deadline
    assert f.observe(line(50, 6.0)) is None
    assert alerts == [] and lines == []  # one late line is not enough (the first steps are slow)
    assert f.observe(line(100, 12.0)) is None  # warn: the run goes on
    assert len(alerts) == 1
    info = alerts[0]
    assert (info["step"], info["total_steps"], info["action"]) == (100, 1000, "warn")
    assert info["eta_seconds"] == pytest.approx(108.0)
    assert info["projected_end"] == pytest.approx(START + 120.0)
    assert info["late_seconds"] == pytest.approx(60.0)
    assert "at step 100/1000" in lines[0] and "ETA 0:01:48" in lines[0]
    assert "0:01:00 after the task's execution_timeout" in lines[0] and "it goes on" in lines[0]
    for step in (150, 200, 250):
        f.observe(line(step, step * 0.12))
    assert len(alerts) == 1  # once, not per line
    f.observe(line(250, 30.0))  # the same step read again: nothing new
    assert len(alerts) == 1


def test_a_run_that_speeds_up_clears_the_alert_and_a_later_miss_alerts_again():
    f, lines, alerts = forecast()
    f.observe(line(50, 6.0))
    f.observe(line(100, 12.0))
    assert f.alerted
    f.observe(line(600, 20.0))  # fast now: 1000 steps end at 33 s
    assert not f.alerted and "deadline forecast cleared: at step 600/1000" in lines[-1]
    f.observe(line(610, 40.0))
    f.observe(line(620, 50.0))  # slow again: late on two lines
    assert len(alerts) == 2


def test_a_late_line_then_an_early_one_does_not_alert():
    f, _, alerts = forecast()
    f.observe(line(50, 6.0))
    f.observe(line(500, 12.0))
    f.observe(line(550, 20.0))
    assert alerts == [] and not f.alerted


def test_checkpoint_and_stop_ends_the_wait_naming_the_forecast():
    f, lines, alerts = forecast("checkpoint_and_stop")
    assert f.observe(line(50, 6.0)) is None
    verdict = f.observe(line(100, 12.0))
    assert verdict is not None and verdict.outcome is Outcome.FAILED
    assert verdict.message.startswith("stopped before its deadline: deadline forecast: at step 100/1000")
    assert "stopping it now with a checkpoint" in lines[-1]
    assert len(alerts) == 1


def test_a_failing_callback_is_logged_and_the_wait_goes_on():
    lines: list[str] = []

    def boom(info):
        raise RuntimeError("pager down")

    f = DeadlineForecast(START + 60, "x", "checkpoint_and_stop", lines.append, boom)
    f.observe(line(50, 6.0))
    verdict = f.observe(line(100, 12.0))
    assert verdict is not None  # the action still happens
    assert any("callback failed: RuntimeError: pager down" in x for x in lines)


def test_a_deferred_forecast_hands_the_alert_over_and_comes_back_alerted():
    f, lines, alerts = forecast(hand_over=True)
    f.observe(line(50, 6.0))
    with pytest.raises(ForecastAlert) as raised:
        f.observe(line(100, 12.0))
    assert raised.value.info["step"] == 100 and alerts == []  # the task runs the callback
    state = f.to_dict()
    forecast_arg(state)  # what the trigger checks of its serialized state
    again = from_state(state, emit=lines.append)
    assert isinstance(again, DeadlineForecast) and again.hand_over
    again.observe(line(150, 18.0))
    again.observe(line(200, 24.0))  # still late: no second alert
    assert again.alerted


def test_no_alert_without_a_rate_or_at_the_end():
    f, _, alerts = forecast()
    for p in (line(0, 5.0), line(0, 10.0), line(1000, 200.0), line(1000, 300.0)):
        assert f.observe(p) is None
    assert f.observe(None) is None
    assert alerts == []


def test_the_deadline_is_the_earlier_of_the_two():
    assert run_deadline(None, None) is None
    assert run_deadline(100.0, None) == (100.0, "the task's execution_timeout")
    assert run_deadline(100.0, 50.0) == (50.0, "the cluster's max_duration_seconds")
    assert run_deadline(None, 70.0) == (70.0, "the cluster's max_duration_seconds")


DEADLINE_STATE = {
    "kind": "deadline",
    "deadline": 1,
    "what": "x",
    "action": "warn",
    "alerted": False,
    "hand_over": True,
}
BUDGET_STATE = {
    "kind": "budget",
    "cap": 2.0,
    "unit": "core-hours",
    "rate": 0.001,
    "since": 5.0,
    "action": "warn",
    "alerted": False,
    "hand_over": False,
}


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ([], "forecasts"),
        ({**DEADLINE_STATE, "kind": "money"}, "forecasts"),
        ({k: v for k, v in DEADLINE_STATE.items() if k != "hand_over"}, "forecasts"),
        ({**DEADLINE_STATE, "deadline": "soon"}, "forecasts.deadline"),
        ({**DEADLINE_STATE, "action": "kill"}, "deadline_action"),
        ({**DEADLINE_STATE, "alerted": "no"}, "forecasts.alerted"),
        ({**DEADLINE_STATE, "hand_over": 1}, "forecasts.hand_over"),
        ({**BUDGET_STATE, "rate": -1}, "forecasts.rate"),
        ({**BUDGET_STATE, "unit": 5}, "forecasts.unit"),
        ({**BUDGET_STATE, "deadline": 1}, "forecasts"),
    ],
)
def test_a_triggers_forecast_state_is_checked_naming_the_field(state, field):
    with pytest.raises(SpecError) as info:
        forecast_arg(state)
    assert info.value.field == field


def test_the_states_round_trip():
    for state in (DEADLINE_STATE, BUDGET_STATE):
        forecast_arg(state)
        assert from_state(state).to_dict() == state


# -- budgets --------------------------------------------------------------------------------
def budget(action: str = "warn", cap: float = 2.0) -> tuple[BudgetForecast, list]:
    lines: list[str] = []
    # 3 cores held since the create, 10 s before the loop started: 3/3600 core-hours a second
    return BudgetForecast(cap, "core-hours", 3 / 3600, START - 10, action, lines.append), lines


def test_a_budget_projection_over_the_cap_acts_on_that_line():
    f, lines = budget("checkpoint_and_stop")
    # 1000 steps at 0.12 s: done 130 s after the create -> 0.108 core-hours; under 2
    assert f.observe(line(100, 12.0)) is None and lines == []
    f2, lines2 = budget("checkpoint_and_stop", cap=0.1)
    verdict = f2.observe(line(100, 12.0))  # over on the first line: acts on it
    assert verdict is not None and verdict.outcome is Outcome.FAILED
    assert verdict.message.startswith(
        "stopped before crossing its budget: budget forecast: at step 100/1000 the training is projected "
        "to hold 0.1083 core-hours at completion"
    )
    assert "over its budget of 0.1 core-hours" in verdict.message and "stopping it now" in lines2[-1]


def test_a_budget_warning_clears_when_the_run_speeds_up():
    f, lines = budget(cap=0.1)
    assert f.observe(line(100, 12.0)) is None and f.alerted and "it goes on" in lines[-1]
    f.observe(line(900, 20.0))  # 1000 steps by 22 s: 32 s held, 0.027 core-hours
    assert not f.alerted and lines[-1].startswith("budget forecast cleared: at step 900/1000")
