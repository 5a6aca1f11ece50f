"""The status model every backend reports in, whatever runs the tasks.

A backend turns what it sees (pods and Jobs, or local processes) into a
:class:`ClusterStatus`; :mod:`airflow_tfk.policies` decides from it alone whether the
training is running, succeeded or failed. Plain data: serialisable for triggers.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Phase(str, enum.Enum):
    PENDING = "Pending"  # not started yet (not created, unscheduled, pulling image)
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"  # exited 0
    FAILED = "Failed"  # failed permanently: no retry left


@dataclass(frozen=True)
class TaskStatus:
    """One task (``role``, ``index``) of the cluster.

    :param reason: why it is in this phase, e.g. ``OOMKilled``, ``ImagePullBackOff``,
        ``Unschedulable``, ``ExitCode``, ``Deleted``.
    :param message: detail for a human: the scheduler's message, the last log lines.
    :param exit_code: the container's or process's exit code, once it exited.
    :param restarts: how many times this index was retried.
    """

    role: str
    index: int
    phase: Phase
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    restarts: int = 0

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["phase"] = self.phase.value
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskStatus:
        return cls(**{**data, "phase": Phase(data["phase"])})


@dataclass(frozen=True)
class ClusterStatus:
    """Every task the backend knows of; ``exists`` is False once nothing of it is left.

    :param deleted_reason: why the cluster was deleted, when whoever deleted it said so
        (e.g. ``killed by run scheduled__2026-11-22T02:00:00+00:00 (kill_previous)``).
    """

    tasks: tuple[TaskStatus, ...] = field(default_factory=tuple)
    exists: bool = True
    deleted_reason: str = ""

    def task(self, role: str, index: int) -> TaskStatus | None:
        for t in self.tasks:
            if t.role == role and t.index == index:
                return t
        return None

    def of_role(self, role: str) -> list[TaskStatus]:
        return sorted((t for t in self.tasks if t.role == role), key=lambda t: t.index)

    def summary(self) -> str:
        """``worker 2/3 succeeded, 1 running; ps 2 running`` - one line for the log."""
        parts = []
        for role in ("chief", "ps", "worker", "evaluator"):
            tasks = self.of_role(role)
            if not tasks:
                continue
            counts: dict[str, int] = {}
            for t in tasks:
                counts[t.phase.value.lower()] = counts.get(t.phase.value.lower(), 0) + 1
            parts.append(f"{role} " + ", ".join(f"{n} {p}" for p, n in sorted(counts.items())))
        return "; ".join(parts) if parts else ("no tasks" if self.exists else "cluster gone")

    def to_dict(self) -> dict[str, Any]:
        return {
            "exists": self.exists,
            "tasks": [t.to_dict() for t in self.tasks],
            "deleted_reason": self.deleted_reason,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterStatus:
        return cls(
            tasks=tuple(TaskStatus.from_dict(t) for t in data["tasks"]),
            exists=bool(data["exists"]),
            deleted_reason=data.get("deleted_reason", ""),
        )
