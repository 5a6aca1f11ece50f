"""What a training used: requested core-seconds, memory-GiB-seconds and accelerator-seconds
per role and in total, and their price.

Each task (a pod on Kubernetes, a process on the local backend) counts from when it
started running to when it ended (or now, for one still running when the run ends) times
what it requested: the scheduler reserves requests, so requests are what a shared cluster
gives up for the training, whether it used them or not. The backend reads the times and
requests (``Backend.usage``) while the tasks are still there, right before the run's end
deletes them. A price table (``[tfk] prices`` in Airflow's configuration, or the
operator's ``prices``) turns the figures into money. No Airflow import.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.usage import TaskUsage

__all__ = ["Figures", "Prices", "TaskUsage", "Usage"]

#: what a price table may hold: a price per hour of each figure, and a currency
PRICE_KEYS = ("cpu_core_hour", "memory_gib_hour", "accelerator_hour")


@dataclass(frozen=True)
class Figures:
    seconds: float = 0.0  # task-seconds
    core_seconds: float = 0.0
    memory_gib_seconds: float = 0.0
    accelerator_seconds: float = 0.0

    def __add__(self, other: Figures) -> Figures:
        return Figures(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in asdict(self).items()}


def astuple(f: Figures) -> tuple[float, float, float, float]:
    return (f.seconds, f.core_seconds, f.memory_gib_seconds, f.accelerator_seconds)


def figures_of(t: TaskUsage) -> Figures:
    s = max(0.0, t.seconds)
    return Figures(s, s * t.cores, s * t.memory_gib, s * t.accelerators)


@dataclass(frozen=True)
class Prices:
    """Price per hour of a requested core, GiB of memory and accelerator."""

    cpu_core_hour: float = 0.0
    memory_gib_hour: float = 0.0
    accelerator_hour: float = 0.0
    currency: str = ""

    @classmethod
    def parse(cls, value: object, field: str = "prices") -> Prices | None:
        """A price table from a mapping or its JSON text; None for none. Refuses, naming
        the key, what is not a finite price of at least 0."""
        if value is None or value == "":
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise SpecError(field, f"must be a JSON object ({exc})", value) from None
        if not isinstance(value, Mapping):
            raise SpecError(field, "must be a mapping of prices per hour", value)
        unknown = sorted(set(value) - {*PRICE_KEYS, "currency"})
        if unknown:
            raise SpecError(
                f"{field}.{unknown[0]}",
                f"is not a price; the keys are {', '.join(PRICE_KEYS)}, currency",
                value,
            )
        found: dict[str, Any] = {}
        for key in PRICE_KEYS:
            price = value.get(key, 0.0)
            if (
                isinstance(price, bool)
                or not isinstance(price, int | float)
                or not math.isfinite(price)
                or price < 0
            ):
                raise SpecError(f"{field}.{key}", "must be a price per hour of at least 0", price)
            found[key] = float(price)
        currency = value.get("currency", "")
        if not isinstance(currency, str) or len(currency) > 8:
            raise SpecError(f"{field}.currency", "must be a short text such as USD", currency)
        return cls(**found, currency=currency)

    def cost(self, f: Figures) -> float:
        return (
            f.core_seconds * self.cpu_core_hour
            + f.memory_gib_seconds * self.memory_gib_hour
            + f.accelerator_seconds * self.accelerator_hour
        ) / 3600.0


@dataclass(frozen=True)
class Usage:
    """The tasks' usage, summed per role and for the cluster."""

    tasks: tuple[TaskUsage, ...] = ()

    @classmethod
    def of(cls, tasks: Iterable[TaskUsage]) -> Usage:
        return cls(tuple(tasks))

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.tasks + other.tasks)

    def per_role(self) -> dict[str, Figures]:
        out: dict[str, Figures] = {}
        for t in self.tasks:
            out[t.role] = out.get(t.role, Figures()) + figures_of(t)
        return out

    def total(self) -> Figures:
        out = Figures()
        for t in self.tasks:
            out = out + figures_of(t)
        return out

    def to_dict(self, prices: Prices | None = None) -> dict[str, Any]:
        """The XCom and the asset's extra: per role, the total, and the cost if priced."""
        total = self.total()
        out: dict[str, Any] = {
            "per_role": {role: f.to_dict() for role, f in sorted(self.per_role().items())},
            "total": total.to_dict(),
            "tasks": len(self.tasks),
        }
        if prices is not None:
            out["cost"] = round(prices.cost(total), 6)
            out["currency"] = prices.currency
        return out

    def summary(self, prices: Prices | None = None) -> str:
        """``usage: 1.25 core-hours, 2.50 GiB-hours, 0 accelerator-hours (ps 0.40, worker
        0.85 core-hours) over 3 tasks; cost 0.0412 USD``."""
        total = self.total()
        roles = ", ".join(f"{r} {f.core_seconds / 3600:.4f}" for r, f in sorted(self.per_role().items()))
        text = (
            f"usage: {total.core_seconds / 3600:.4f} core-hours, {total.memory_gib_seconds / 3600:.4f} "
            f"GiB-hours, {total.accelerator_seconds / 3600:.4f} accelerator-hours requested"
            f"{f' ({roles} core-hours)' if roles else ''} over {len(self.tasks)} task(s)"
        )
        if prices is not None:
            text += f"; cost {prices.cost(total):.4f}{f' {prices.currency}' if prices.currency else ''}"
        return text

    def to_event(self) -> list[dict[str, Any]]:
        """The tasks, as a trigger event carries them (JSON)."""
        return [
            {"task": t.task, "role": t.role, "seconds": t.seconds, "requests": dict(t.requests)}
            for t in self.tasks
        ]

    @classmethod
    def from_event(cls, data: object) -> Usage:
        """The tasks a trigger event carried; what is not a task is left out."""
        out = []
        for item in data if isinstance(data, list) else []:
            try:
                requests = {str(k): float(v) for k, v in dict(item["requests"]).items()}
                out.append(TaskUsage(str(item["task"]), str(item["role"]), float(item["seconds"]), requests))
            except (KeyError, TypeError, ValueError):
                continue
        return cls(tuple(out))
