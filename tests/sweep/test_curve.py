"""The loss curve a trial reports to the pruner: the grid every trial shares."""

from __future__ import annotations

import pytest

from airflow_tfk.protocol.progress import Progress
from airflow_tfk.sweep.curve import MAX_POINTS, LossCurve, grid_step


def lines(steps: list[int], total: int = 1000, loss=lambda s: 1.0 / s, status: str = "running"):
    return [Progress(s, total, loss(s), 0.0, float(s), status) for s in steps]


def test_the_grid_is_a_hundredth_of_the_training_unless_given() -> None:
    assert grid_step(None, 50_000) == 500
    assert grid_step(None, 30) == 1
    assert grid_step(7, 5_000) == 7
    # never more points than a completed trial can afford to write
    assert grid_step(1, 10**7) == 10**7 // MAX_POINTS


def test_off_grid_lines_give_values_at_the_shared_points() -> None:
    """Two trials whose lines never share a step (parameter_server) still have values at
    the same grid points: the last line at or before each."""
    a, b = LossCurve(1.0, interval_steps=50), LossCurve(1.0, interval_steps=50)
    a.feed(lines([9, 59, 109, 163]))
    b.feed(lines([12, 61, 113, 158]))
    assert a.newest() == (150, pytest.approx(1 / 109))
    assert b.newest() == (150, pytest.approx(1 / 113))
    assert a.points() == {50: pytest.approx(1 / 9), 100: pytest.approx(1 / 59), 150: pytest.approx(1 / 109)}
    assert set(b.points()) == {50, 100, 150}


def test_a_read_that_skips_lines_takes_them_all_and_reports_the_newest() -> None:
    c = LossCurve(0.5, interval_steps=10)
    assert c.feed(lines([10, 20])) is True
    assert c.feed(lines([10, 20])) is False  # nothing new
    c.feed(lines([30, 40, 50, 60]))
    assert c.last_step == 60
    point, value = c.newest()
    assert point == 60 and value == pytest.approx(c.smoothed)
    assert sorted(c.points()) == [10, 20, 30, 40, 50, 60]


def test_maximised_studies_report_negated_losses_and_the_done_line_is_seen() -> None:
    c = LossCurve(1.0, sign=-1.0, interval_steps=100)
    c.feed(lines([100, 200]))
    assert c.newest() == (200, pytest.approx(-1 / 200))
    assert not c.finished
    c.feed(lines([200], status="done"))  # the last step again, as done
    assert c.finished and c.last_step == 200


def test_lines_without_a_finite_loss_give_no_value() -> None:
    c = LossCurve(1.0, interval_steps=10)
    c.feed(lines([10, 20], loss=lambda s: float("nan")))
    assert c.last_step == 20 and c.newest() is None and c.points() == {}
    c.feed(lines([35]))
    assert c.newest() is None  # no value at or before point 30: 35 is later than it
    c.feed(lines([40]))
    assert c.newest() == (40, pytest.approx(1 / 40)) and set(c.points()) == {40}
