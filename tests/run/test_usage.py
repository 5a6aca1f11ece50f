"""A run's usage: requested core-, memory-GiB- and accelerator-seconds per role and in
total, priced by a table that is checked naming its key."""

from __future__ import annotations

import math

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.run.usage import Prices, TaskUsage, Usage

GIB = 2.0**30


def _usage() -> Usage:
    return Usage.of(
        [
            TaskUsage("ps-0", "ps", 100.0, {"cpu": 0.5, "memory": 1 * GIB}),
            TaskUsage("worker-0", "worker", 80.0, {"cpu": 2.0, "memory": 4 * GIB, "nvidia.com/gpu": 1.0}),
            TaskUsage("worker-1", "worker", 60.0, {"cpu": 2.0, "memory": 4 * GIB, "nvidia.com/gpu": 1.0}),
            TaskUsage("chief-0", "chief", 0.0, {}),  # never started: counts nothing
        ]
    )


def test_figures_per_role_and_in_total():
    u = _usage()
    roles = u.per_role()
    assert roles["ps"].core_seconds == 50.0 and roles["ps"].memory_gib_seconds == 100.0
    assert roles["worker"].core_seconds == 280.0 and roles["worker"].accelerator_seconds == 140.0
    assert roles["worker"].memory_gib_seconds == 560.0 and roles["worker"].seconds == 140.0
    total = u.total()
    assert (total.core_seconds, total.memory_gib_seconds, total.accelerator_seconds) == (330.0, 660.0, 140.0)


def test_the_price_table_turns_figures_into_money():
    prices = Prices.parse(
        '{"cpu_core_hour": 0.036, "memory_gib_hour": 0.0036, "accelerator_hour": 3.6, "currency": "EUR"}'
    )
    assert prices is not None
    cost = prices.cost(_usage().total())
    assert math.isclose(cost, (330 * 0.036 + 660 * 0.0036 + 140 * 3.6) / 3600)
    d = _usage().to_dict(prices)
    assert d["currency"] == "EUR" and d["cost"] == round(cost, 6) and d["tasks"] == 4
    assert d["per_role"]["worker"]["core_seconds"] == 280.0
    assert "cost 0.1440 EUR" in _usage().summary(prices)
    assert "cost" not in _usage().to_dict() and "cost" not in _usage().summary()


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ("{not json", "prices"),
        ([1], "prices"),
        ({"cpu_hour": 1}, "prices.cpu_hour"),
        ({"cpu_core_hour": -1}, "prices.cpu_core_hour"),
        ({"cpu_core_hour": "1"}, "prices.cpu_core_hour"),
        ({"cpu_core_hour": True}, "prices.cpu_core_hour"),
        ({"memory_gib_hour": float("nan")}, "prices.memory_gib_hour"),
        ({"currency": 5}, "prices.currency"),
    ],
)
def test_a_bad_price_table_names_the_key(table, field):
    with pytest.raises(SpecError) as info:
        Prices.parse(table)
    assert info.value.field == field


def test_no_table_is_none():
    assert Prices.parse(None) is None and Prices.parse("") is None


def test_a_trigger_event_carries_the_tasks_and_drops_what_is_not_one():
    u = _usage()
    back = Usage.from_event([*u.to_event(), {"task": "x"}, "junk"])
    assert back.total() == u.total() and len(back.tasks) == 4
    assert Usage.from_event(None).tasks == ()
