"""Running a sans-IO plan: the step loop, written once for the sync and the async drivers.

A plan is a generator that yields operations and is sent each one's answer: the wait loop
(:meth:`airflow_tfk.watch.WaitLoop.plan`) and the Kubernetes backend's request and watch
plans (:mod:`airflow_tfk.backends._k8s_plan`). What an operation does is I/O, and that is
the one thing that differs between a blocking caller and the triggerer's event loop: it
lives in an I/O object (:class:`PlanIO`) with one method per kind of operation, a sync
one and an async one per plan family. How a plan is stepped, what is sent back, what is
handed to the caller and what is closed at the end does not differ, and is here, once:
:func:`drive` and :func:`adrive` differ only by the ``await`` of the operation.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Mapping
from contextlib import aclosing, closing
from typing import Any, ClassVar, Generic, TypeVar

OpT = TypeVar("OpT")
ResultT = TypeVar("ResultT")


class PlanIO:
    """What a plan's operations do: one method per kind of operation.

    ``OPS`` maps each kind (the operation's type) to the name of its method; an operation
    of any other type is not I/O and goes to the driver's caller (the watch's statuses).
    A sync subclass has plain methods and ``close``; an async one coroutine methods and
    ``aclose``.
    """

    OPS: ClassVar[Mapping[type, str]] = {}

    def handles(self, op: object) -> bool:
        return type(op) in self.OPS

    def do(self, op: object) -> Any:
        """The method of ``op``'s kind, called with it (a coroutine for an async I/O)."""
        return getattr(self, self.OPS[type(op)])(op)

    def close(self) -> None:
        """Release what the operations opened (a sync I/O)."""

    async def aclose(self) -> None:
        """Release what the operations opened (an async I/O)."""


class Steps(Generic[OpT, ResultT]):
    """A plan, one operation at a time: iterating gives its operations, :meth:`answer`
    sets what the next step sends it (None unless set), and ``value`` is what it returned
    once the iteration has ended."""

    __slots__ = ("_answer", "_plan", "value")
    value: ResultT

    def __init__(self, plan: Generator[OpT, Any, ResultT]) -> None:
        self._plan = plan
        self._answer: Any = None

    def __iter__(self) -> Steps[OpT, ResultT]:
        return self

    def __next__(self) -> OpT:
        answer, self._answer = self._answer, None
        try:
            return self._plan.send(answer)  # send(None) starts a fresh generator
        except StopIteration as stop:
            self.value = stop.value
            raise StopIteration from None

    def answer(self, value: Any) -> None:
        self._answer = value

    def close(self) -> None:
        self._plan.close()


def drive(steps: Steps[Any, Any], io: PlanIO) -> Generator[Any, None, None]:
    """Run ``steps`` with a sync ``io``, yielding the operations that are not I/O.

    Whether the plan ends, raises or the caller stops iterating, what ``io`` opened is
    closed and the plan is closed with it.
    """
    try:
        for op in steps:
            if io.handles(op):
                steps.answer(io.do(op))
            else:
                yield op
    finally:
        io.close()
        steps.close()


async def adrive(steps: Steps[Any, Any], io: PlanIO) -> AsyncGenerator[Any, None]:
    """:func:`drive` with an async ``io`` (the triggerer)."""
    try:
        for op in steps:
            if io.handles(op):
                steps.answer(await io.do(op))
            else:
                yield op
    finally:
        await io.aclose()
        steps.close()


def finish(plan: Generator[Any, Any, ResultT], io: PlanIO) -> ResultT:
    """Run a plan whose every operation is I/O with a sync ``io``; its return value."""
    steps = Steps(plan)
    with closing(drive(steps, io)) as ops:
        for op in ops:
            raise TypeError(f"{type(io).__name__} has no method for {op!r}")
    return steps.value


async def afinish(plan: Generator[Any, Any, ResultT], io: PlanIO) -> ResultT:
    """:func:`finish` with an async ``io``."""
    steps = Steps(plan)
    async with aclosing(adrive(steps, io)) as ops:
        async for op in ops:
            raise TypeError(f"{type(io).__name__} has no method for {op!r}")
    return steps.value
