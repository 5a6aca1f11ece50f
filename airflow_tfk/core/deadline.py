"""Waiting with a deadline: the clock a polling loop reads and sleeps on, injectable so
tests run such loops on a fake clock in no time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    """``now`` (monotonic seconds) and ``sleep``; :data:`SYSTEM` is the real one."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def deadline(self, seconds: float) -> Deadline:
        return Deadline(self, self.now() + seconds)


SYSTEM = Clock()


@dataclass(frozen=True)
class Deadline:
    """A point in time on ``clock``, ``seconds`` after it was made."""

    clock: Clock
    at: float

    def passed(self) -> bool:
        return self.clock.now() >= self.at

    def pause(self, poll: float) -> None:
        """Sleep ``poll`` seconds, or less if the deadline comes first."""
        self.clock.sleep(min(poll, max(0.0, self.at - self.clock.now())))
