"""The progress line format shared by the training runtime (writer) and the watcher (reader).

One JSON object per line on stdout, marked with ``"tfk": "progress"`` so it can be picked
out of any other output. Pure Python: importable without TensorFlow or Airflow.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

MARKER = "progress"


@dataclass(frozen=True)
class Progress:
    """:param status: ``running`` | ``done`` | ``failed``."""

    step: int
    total_steps: int
    loss: float | None
    start_time: float
    time: float
    status: str = "running"

    def to_line(self) -> str:
        return json.dumps({"tfk": MARKER, **asdict(self)}, separators=(",", ":"))

    @property
    def fraction(self) -> float:
        return min(1.0, self.step / self.total_steps) if self.total_steps > 0 else 0.0

    def eta_seconds(self) -> float | None:
        """Remaining seconds at the average rate so far; None before any step."""
        elapsed = self.time - self.start_time
        if self.step <= 0 or elapsed <= 0 or self.total_steps <= 0:
            return None
        return max(0.0, (self.total_steps - self.step) * elapsed / self.step)


def progress_line(
    step: int,
    total_steps: int,
    loss: float | None,
    start_time: float,
    status: str = "running",
    now: float | None = None,
) -> str:
    return Progress(
        step,
        total_steps,
        None if loss is None else float(loss),
        start_time,
        time.time() if now is None else now,
        status,
    ).to_line()


def parse_line(line: str) -> Progress | None:
    """The progress in ``line``, or None if it is not a well-formed progress line."""
    data = parse_event(line, MARKER)
    if data is None:
        return None
    try:
        return Progress(
            int(data["step"]),
            int(data["total_steps"]),
            None if data.get("loss") is None else float(data["loss"]),
            float(data["start_time"]),
            float(data["time"]),
            str(data.get("status", "running")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def last_progress(text: str) -> Progress | None:
    """The newest progress line in a log."""
    for line in reversed(text.splitlines()):
        p = parse_line(line)
        if p is not None:
            return p
    return None


# -- other structured lines --------------------------------------------------------------
# Same shape as progress lines ({"tfk": <kind>, ...}) but a different kind, so
# parse_line() ignores them. Written by the training runtime for the provider and tests.


def event_line(kind: str, **fields: object) -> str:
    """``{"tfk": kind, **fields}`` on one line; ``kind`` must not be ``progress``."""
    if kind == MARKER:
        raise ValueError("use progress_line() for progress")
    return json.dumps({"tfk": kind, **fields}, separators=(",", ":"), default=str)


def parse_event(line: str, kind: str) -> dict | None:
    """The fields of an ``event_line(kind, ...)`` in ``line``, or None."""
    start = line.find("{")
    if start < 0 or '"tfk"' not in line:
        return None
    try:
        data = json.loads(line[start:])
    except ValueError:
        return None
    if not isinstance(data, dict) or data.pop("tfk", None) != kind:
        return None
    return data


def last_event(text: str, kind: str) -> dict | None:
    """The newest ``kind`` event in a log."""
    for line in reversed(text.splitlines()):
        event = parse_event(line, kind)
        if event is not None:
            return event
    return None
