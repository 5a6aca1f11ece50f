"""How ``clusters status`` and ``list`` word a task's phase for a person.

The backends report a task deleted by the end of a run as ``Deleted`` (pending on the local
backend, failed on Kubernetes: neither finished by itself), with the exit code of the
SIGTERM it got. After the training succeeded that is the usual ending of the PS and of a
``parameter_server`` cluster's workers, not a failure: it is shown as ``stopped``, without
the code. The status model itself stays as the waits and policies read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus

#: Roles in the order a summary names them (the decisive ones first).
ROLE_ORDER = ("chief", "ps", "worker", "evaluator")
DELETED = "Deleted"
STOPPED_AFTER_SUCCESS = "stopped after the training succeeded"


@dataclass(frozen=True)
class TaskView:
    task: TaskStatus
    phase: str  # succeeded, running, pending, failed, stopped, deleted
    why: str  # the reason, with the message's first line when it waits or failed
    exit_code: int | None

    def data(self) -> dict[str, Any]:
        """The task for ``-o json|yaml``: the view's phase, the backend's own words."""
        t = self.task
        return {
            "task": t.name,
            "role": t.role,
            "index": t.index,
            "phase": self.phase,
            "reason": t.reason or None,
            "message": self.why if self.phase == "stopped" else (t.message or None),
            "exit_code": t.exit_code,
            "restarts": t.restarts,
        }


def _succeeded(status: ClusterStatus) -> bool:
    """The training's decisive role (the chief, else every worker) succeeded."""
    chief = [t for t in status.tasks if t.role == "chief"]
    decisive = chief or [t for t in status.tasks if t.role == "worker"]
    return bool(decisive) and all(t.phase is Phase.SUCCEEDED for t in decisive)


def shown(task: TaskStatus, status: ClusterStatus) -> TaskView:
    if task.reason == DELETED and task.phase is not Phase.SUCCEEDED:
        if _succeeded(status):
            return TaskView(task, "stopped", STOPPED_AFTER_SUCCESS, None)
        message = task.message.strip().splitlines()[0] if task.message.strip() else ""
        return TaskView(task, "deleted", message[:300], task.exit_code)
    why = task.reason
    if task.reason and task.message.strip() and task.phase in (Phase.PENDING, Phase.FAILED):
        # why it waits or failed, in the words of whoever refused it (one line)
        why = f"{task.reason}: {task.message.strip().splitlines()[0][:300]}"
    return TaskView(task, task.phase.value.lower(), why, task.exit_code)


def summary(status: ClusterStatus) -> str:
    """``ps 1 stopped; worker 2 succeeded``: :meth:`ClusterStatus.summary` in the views'
    words."""
    per_role: dict[str, dict[str, int]] = {}
    for task in status.tasks:
        phases = per_role.setdefault(task.role, {})
        phase = shown(task, status).phase
        phases[phase] = phases.get(phase, 0) + 1
    order = [*ROLE_ORDER, *sorted(set(per_role) - set(ROLE_ORDER))]
    parts = [
        f"{role} " + ", ".join(f"{n} {p}" for p, n in sorted(per_role[role].items()))
        for role in order
        if role in per_role
    ]
    return "; ".join(parts) if parts else ("no tasks" if status.exists else "cluster gone")
