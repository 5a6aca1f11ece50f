"""The step loop every plan driver shares (airflow_tfk/_plan_driver.py): what a plan is
sent, what reaches the caller, what is closed, the same with a sync and an async I/O.

The plans and I/O objects here are tiny stand-ins on purpose: the loop is generic, and
its real users (the wait loop, the Kubernetes watch) are tested on the local backend and
the real API server."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_tfk._plan_driver import PlanIO, Steps, adrive, afinish, drive, finish


@dataclass(frozen=True)
class Add:
    n: int


@dataclass(frozen=True)
class Note:
    """Not I/O: handed to the driver's caller."""

    text: str


class Counter(PlanIO):
    OPS = {Add: "add"}

    def __init__(self) -> None:
        self.total = 0
        self.closed = 0

    def add(self, op: Add) -> int:
        self.total += op.n
        return self.total

    def close(self) -> None:
        self.closed += 1


class AsyncCounter(Counter):
    async def add(self, op: Add) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        return Counter.add(self, op)

    async def aclose(self) -> None:
        self.closed += 1


def adding(*numbers: int) -> Generator[Add | Note, Any, list[Any]]:
    """Sends each number, notes each running total, returns every answer it got."""
    got = []
    for n in numbers:
        total = yield Add(n)
        got.append(total)
        got.append((yield Note(f"at {total}")))  # a note's answer is None
    return got


async def collect(agen: Any) -> list[Any]:
    return [x async for x in agen]


def test_finish_sends_each_answer_and_returns_the_plans_value() -> None:
    io = Counter()
    with pytest.raises(TypeError, match=r"Counter has no method for Note\(text='at 1'\)"):
        finish(adding(1, 2), io)  # a Note is not I/O: finish has no caller to hand it to
    assert io.closed == 1

    def only_io() -> Generator[Add, int, int]:
        first = yield Add(3)
        second = yield Add(4)
        return first * 100 + second

    io = Counter()
    assert finish(only_io(), io) == 307 and io.closed == 1
    io = AsyncCounter()
    assert asyncio.run(afinish(only_io(), io)) == 307 and io.closed == 1


def test_drive_hands_what_is_not_io_to_the_caller_in_order() -> None:
    steps = Steps(adding(1, 2, 3))
    assert [n.text for n in drive(steps, Counter())] == ["at 1", "at 3", "at 6"]
    assert steps.value == [1, None, 3, None, 6, None]
    asteps = Steps(adding(1, 2, 3))
    assert [n.text for n in asyncio.run(collect(adrive(asteps, AsyncCounter())))] == ["at 1", "at 3", "at 6"]
    assert asteps.value == steps.value


def test_stopping_early_or_a_failing_plan_closes_the_io_and_the_plan() -> None:
    closed = []

    def endless() -> Generator[Add | Note, Any, None]:
        try:
            while True:
                yield Add(1)
                yield Note("tick")
        finally:
            closed.append("plan")

    io = Counter()
    ops = drive(Steps(endless()), io)
    assert next(ops) == Note("tick")
    ops.close()  # the caller stops (a watch abandoned by its consumer)
    assert (io.closed, closed) == (1, ["plan"])

    def failing() -> Generator[Add, int, None]:
        yield Add(1)
        raise RuntimeError("boom")

    aio = AsyncCounter()
    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(afinish(failing(), aio))
    assert aio.closed == 1
