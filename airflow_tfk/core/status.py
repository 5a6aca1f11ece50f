"""The status model every backend reports in, whatever runs the tasks.

A backend turns what it sees (pods and Jobs, or local processes) into a
:class:`ClusterStatus`; :mod:`airflow_tfk.run.policies` decides from it alone whether the
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
class Activity:
    """What a backend can tell of a running task's life signs.

    :param last_output: UNIX time of its newest log output, None if unknown.
    :param note: what is wrong with its process, if the backend sees it (``stopped``).
    """

    last_output: float | None = None
    note: str = ""


TaskKey = tuple[str, int]
_SUMMARY_ROLES = ("chief", "ps", "worker", "evaluator")


@dataclass(frozen=True)
class ClusterStatus:
    """Every task the backend knows of; ``exists`` is False once nothing of it is left.

    :param deleted_reason: why the cluster was deleted, when whoever deleted it said so
        (e.g. ``killed by run scheduled__2026-11-22T02:00:00+00:00 (kill_previous)``).

    The policies read a status per watch event, so what they ask (a task by key, the
    failed tasks, how many tasks of a role are in a phase) is answered from views
    computed once per status, or handed over ready-made by a builder that maintains them
    (the Kubernetes watch). The views take no part in equality or serialisation.
    """

    tasks: tuple[TaskStatus, ...] = field(default_factory=tuple)
    exists: bool = True
    deleted_reason: str = ""
    _counts: dict[tuple[str, Phase], int] | None = field(default=None, compare=False, repr=False)
    _failed: tuple[TaskStatus, ...] | None = field(default=None, compare=False, repr=False)
    _index: dict[TaskKey, TaskStatus] | None = field(default=None, compare=False, repr=False)

    def _tallies(self) -> tuple[dict[tuple[str, Phase], int], tuple[TaskStatus, ...]]:
        if self._counts is None or self._failed is None:
            counts: dict[tuple[str, Phase], int] = {}
            for t in self.tasks:
                counts[(t.role, t.phase)] = counts.get((t.role, t.phase), 0) + 1
            object.__setattr__(self, "_counts", counts)
            object.__setattr__(self, "_failed", tuple(t for t in self.tasks if t.phase is Phase.FAILED))
        assert self._counts is not None and self._failed is not None
        return self._counts, self._failed

    def task(self, role: str, index: int) -> TaskStatus | None:
        if self._index is None:  # built on the first lookup: most statuses never need it
            object.__setattr__(self, "_index", {(t.role, t.index): t for t in self.tasks})
        assert self._index is not None
        return self._index.get((role, index))

    def count(self, role: str, phase: Phase) -> int:
        """How many tasks of ``role`` are in ``phase``."""
        return self._tallies()[0].get((role, phase), 0)

    def failed(self) -> tuple[TaskStatus, ...]:
        """The tasks that failed for good."""
        return self._tallies()[1]

    def of_role(self, role: str) -> list[TaskStatus]:
        return sorted((t for t in self.tasks if t.role == role), key=lambda t: t.index)

    def phases(self) -> frozenset[tuple[str, Phase]]:
        """Which phases each role has tasks in, without the counts: it changes when a role
        enters or leaves a phase, not with every task that follows the others."""
        return frozenset(key for key, n in self._tallies()[0].items() if n)

    def summary(self) -> str:
        """``worker 2/3 succeeded, 1 running; ps 2 running`` - one line for the log."""
        per_role: dict[str, list[tuple[str, int]]] = {}
        for (role, phase), n in self._tallies()[0].items():
            if n:
                per_role.setdefault(role, []).append((phase.value.lower(), n))
        parts = [
            f"{role} " + ", ".join(f"{n} {p}" for p, n in sorted(per_role[role]))
            for role in _SUMMARY_ROLES
            if role in per_role
        ]
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
