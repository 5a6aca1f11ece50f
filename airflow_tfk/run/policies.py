"""Success policies: from a :class:`ClusterStatus` and the mode, is the training done?

Pure functions, shared by every backend, the sensor and the trigger, so "done" means the
same thing everywhere.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from airflow_tfk.core.excerpt import failure_cause, failure_excerpt
from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus
from airflow_tfk.spec.cluster import Mode, TFClusterSpec


class Outcome(str, enum.Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    message: str = ""
    failed_task: TaskStatus | None = None


#: roles whose failure does not fail the training
ADVISORY_ROLES = frozenset({"evaluator"})


def decisive_roles(mode: Mode, roles: dict[str, int]) -> dict[str, int]:
    """Roles (with replica counts) whose success is the training's success."""
    if Mode(mode) is Mode.PARAMETER_SERVER:
        return {"chief": roles.get("chief", 1)}
    return {r: n for r, n in roles.items() if r in ("worker", "chief")}


def roles_after_success(mode: Mode, roles: list[str]) -> list[str]:
    """Roles still running once the training succeeded, to delete after the grace period.

    PS never exit; in ``parameter_server`` mode the workers serve until told to stop.
    """
    leftover = {"ps", "evaluator"}
    if Mode(mode) is Mode.PARAMETER_SERVER:
        leftover |= {"worker"}
    return [r for r in roles if r in leftover]


def evaluate(
    mode: Mode, replicas: dict[str, int], status: ClusterStatus, max_lost_workers: int = 0
) -> Verdict:
    """Decide the training's outcome.

    :param replicas: replicas per role present in the spec, e.g. ``{"ps": 1, "worker": 2}``.
    :param max_lost_workers: ``parameter_server`` only: workers that may fail for good
        while the chief goes on; one more fails the training, naming them all.
    Any permanently failed task fails the training with that task's own reason; a cluster
    that vanished while running failed too (someone deleted it, e.g. a newer run). The
    evaluator is the exception: it only watches the training, so its failure does not
    fail it (the training operator reports it in the task log).
    """
    decisive = decisive_roles(mode, replicas)
    if status.exists and _all_succeeded(decisive, status):
        # The training's result is the decisive tasks': a PS (or evaluator) that failed
        # afterwards - e.g. killed by the cluster-side deadline before a retry looked -
        # does not undo it, so a retry does not train (and export) a second time.
        return Verdict(Outcome.SUCCEEDED, "all decisive tasks succeeded")
    if not status.exists:
        why = status.deleted_reason or "deleted from outside"
        return Verdict(Outcome.FAILED, f"the cluster no longer exists ({why})")
    failed = [t for t in status.failed() if t.role not in ADVISORY_ROLES]
    if failed and max_lost_workers and Mode(mode) is Mode.PARAMETER_SERVER:
        lost = [t for t in failed if t.role == "worker"]
        if len(lost) > max_lost_workers:
            names = ", ".join(t.name for t in lost)
            return Verdict(
                Outcome.FAILED,
                f"{len(lost)} workers lost for good ({names}), more than max_lost_workers="
                f"{max_lost_workers}{_detail(lost[0])}",
                lost[0],
            )
        failed = [t for t in failed if t.role != "worker"]
    if failed:
        # Blame a decisive task first (the one that never finished), then a task that
        # failed on its own over one killed by the deadline.
        first = sorted(
            failed,
            key=lambda t: (
                t.role not in decisive,
                t.reason == "DeadlineExceeded",
                t.role != "chief",
                t.role,
                t.index,
            ),
        )[0]
        first = _deadline_blame(first, decisive, status)
        code = f", exit code {first.exit_code}" if first.exit_code is not None else ""
        return Verdict(
            Outcome.FAILED,
            f"task {first.name} failed ({first.reason or 'Error'}{code}){_detail(first)}",
            first,
        )
    return Verdict(Outcome.RUNNING)


def _detail(task: TaskStatus) -> str:
    """The cause first (the last exception line, or what the exit signal means), then the
    log's meaningful last lines, where the cause is not simply their last line."""
    excerpt = failure_excerpt(task.message) if task.message else ""
    # OOMKilled already names the signal's cause; the backend's words for it follow.
    signal_code = None if task.reason == "OOMKilled" else task.exit_code
    cause = failure_cause(task.message or "", signal_code)
    if not cause:
        return f": {excerpt}" if excerpt else ""
    if not excerpt or excerpt == cause:
        return f": {cause}"
    return f": {cause}\n{excerpt}"


def _deadline_blame(first: TaskStatus, decisive: dict[str, int], status: ClusterStatus) -> TaskStatus:
    """Every task of a cluster shares its deadline, but on Kubernetes each role's Job
    meets it on its own: the PS Job may be failed a moment before the workers' is. What
    never finished is then the unfinished decisive task, not the PS."""
    if first.reason != "DeadlineExceeded" or first.role in decisive:
        return first
    for task in status.tasks:
        if task.role in decisive and task.phase is not Phase.SUCCEEDED:
            return dataclasses.replace(task, phase=Phase.FAILED, reason=first.reason, message=first.message)
    return first


def _all_succeeded(decisive: dict[str, int], status: ClusterStatus) -> bool:
    for role, count in decisive.items():
        if status.count(role, Phase.SUCCEEDED) < count:
            return False  # per event, without looking at each task
        for index in range(count):
            task = status.task(role, index)
            if task is None or task.phase is not Phase.SUCCEEDED:
                return False
    return True


def replicas_of(spec: TFClusterSpec) -> dict[str, int]:
    return {role: r.replicas for role, r in spec.roles().items()}
