"""A trial's loss curve, on the grid of steps at which the pruner compares trials.

Optuna's median pruner compares a trial's intermediate value at step S only with the
values the finished trials reported at exactly S. Progress lines do not fall on the same
steps in every trial: ``parameter_server`` reports the step its workers had reached
(59, 109, ...). So the values go to Optuna at multiples of a grid step G, the same for
every trial: the value at ``k * G`` is the smoothed loss of the trial's last progress line
at or before ``k * G``. A running trial reports its newest grid point (the only one its
pruning decision looks at); a completed trial reports every point up to its end, so a
running trial always finds the finished ones at its own step. Both take the last line at
or before the point, so neither is judged on a later step than the other's.

Pure: no Optuna, no backend.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from airflow_tfk.protocol.progress import Progress

#: Grid points per training when the pruner's ``interval_steps`` is left out.
DEFAULT_POINTS = 100
#: Grid points per training at most: a completed trial reports each one, and each is a
#: write to the study.
MAX_POINTS = 1000


def grid_step(interval_steps: int | None, total_steps: int) -> int:
    """The grid step: ``interval_steps`` if given, else a hundredth of the training;
    never finer than :data:`MAX_POINTS` points over ``total_steps``."""
    finest = -(-max(1, total_steps) // MAX_POINTS)
    wanted = interval_steps if interval_steps else max(1, total_steps // DEFAULT_POINTS)
    return max(wanted, finest)


class LossCurve:
    """The smoothed loss of one trial, read line by line, looked up at its grid points.

    :param smoothing: weight of the newest loss in the running average.
    :param sign: -1 when the study maximises (the pruner then compares negated losses).
    :param interval_steps: the pruner's grid step, or None (from the first line's total).
    """

    def __init__(self, smoothing: float, sign: float = 1.0, interval_steps: int | None = None) -> None:
        self.smoothing = smoothing
        self.sign = sign
        self.interval_steps = interval_steps
        self.grid: int | None = None
        self.last_step = 0
        self.last_time: float | None = None  # when the newest line was written (its clock)
        self.smoothed: float | None = None
        self.finished = False  # its newest line says the training is done (or failed)
        self._values: list[tuple[int, float]] = []  # (step, value to report) of each line with a loss

    def feed(self, lines: Iterable[Progress | None]) -> bool:
        """Take the progress lines newer than the last one seen; True if any was new."""
        moved = False
        for p in lines:
            if p is None:
                continue
            if p.status != "running" and p.step >= self.last_step:
                self.finished = True
            # The last step comes twice (running, then done): one value a step.
            if p.step <= self.last_step:
                continue
            self.last_step = p.step
            self.last_time = p.time
            moved = True
            if self.grid is None:
                self.grid = grid_step(self.interval_steps, p.total_steps)
            if p.loss is None or not math.isfinite(p.loss):
                continue
            a = self.smoothing
            self.smoothed = p.loss if self.smoothed is None else a * p.loss + (1 - a) * self.smoothed
            self._values.append((p.step, self.sign * self.smoothed))
        return moved

    def newest(self) -> tuple[int, float] | None:
        """The newest grid point with a value, and that value; None before any."""
        if not self._values or self.grid is None:
            return None
        point = self._values[-1][0] // self.grid * self.grid
        for step, value in reversed(self._values):
            if step <= point:
                return point, value
        return None  # every line so far is past the first point

    def points(self) -> dict[int, float]:
        """Every grid point from the first line's on, with its value."""
        if not self._values or self.grid is None:
            return {}
        g = self.grid
        out: dict[int, float] = {}
        i = 0
        first = -(-self._values[0][0] // g) * g
        for point in range(first, self._values[-1][0] // g * g + 1, g):
            while i + 1 < len(self._values) and self._values[i + 1][0] <= point:
                i += 1
            out[point] = self._values[i][1]
        return out
