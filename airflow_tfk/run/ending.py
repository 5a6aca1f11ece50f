"""End a run: the one function every path that ends a training's cluster goes through.

Success, failure, a kill, a timeout, a replace, ``kill_previous``, the orphan sweeper and
a sweep's trials differ only in what they pass: whether the run's result is accepted,
what the clean-up policy removes, and why. The steps, and their order, are the same:

1. after a success, the grace period (the evaluator scores the last checkpoint);
2. ownership: the cluster must still carry the identity of the handle's owner. A cluster
   that is gone is nothing to end; one of another task instance is refused, naming its
   owner, and nothing of it is touched;
3. the logs the policy keeps, copied while their tasks are still there;
4. a rejected run's exports, read while its tasks (and their logs) are still there;
   the tasks' usage (run times and requests, :mod:`~airflow_tfk.run.usage`);
5. the delete, with the reason kept where a watcher of the cluster reads it;
6. the rejected run's exports set aside: after the delete, so no task of the run can
   export anything more.

Backend-agnostic, no Airflow import.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef, RunExport
from airflow_tfk.core.status import ClusterStatus, Phase
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.run.policies import roles_after_success
from airflow_tfk.run.usage import Usage

log = logging.getLogger(__name__)
Emit = Callable[[str], None]

#: Log lines copied per task: a failed task's end says why, a finished task's end holds its
#: results (export, metrics); a leftover's is only context.
FAILED_LOG_LINES = 100
FINISHED_LOG_LINES = 100
LEFTOVER_LOG_LINES = 50
#: Failed tasks whose logs are copied at most (the first few say why; the rest repeat it).
FAILED_LOGS_MAX = 5
#: Finished tasks whose logs ``cleanup='all'`` copies at most: the chief and the first
#: workers say what the run did; hundreds of workers' tails would bury it.
FINISHED_LOGS_MAX = 8
#: Roles a kept failed cluster still stops: they never exit by themselves.
NEVER_EXITING = ("ps", "evaluator")


class RunResult(enum.Enum):
    """What the run's result is worth, which decides the fate of what it exported."""

    ACCEPTED = "accepted"  # it succeeded and its task accepts it: its exports stay
    REJECTED = "rejected"  # failed, killed, timed out, replaced, pruned, orphaned: set aside
    UNDECIDED = "undecided"  # another path owns the verdict (a sweep trial being ended)


class Remove(enum.Enum):
    """What of the cluster goes (the clean-up policy)."""

    ALL = "all"  # everything with the cluster's label
    LEFTOVERS = "ps"  # after success: the roles that never exit; finished tasks wait for their TTL
    KEEP_FAILED = "keep"  # after failure: stop what never exits, keep the rest for debugging
    RUNNING = "running"  # the roles with a task still running, whatever the mode


@dataclass(frozen=True)
class Ended:
    """What :func:`end_run` did."""

    owned: bool = True  # False: the cluster is another's and was left alone
    gone: bool = False  # there was no cluster to end
    deleted: bool = False  # the whole cluster was deleted
    removed: tuple[str, ...] = ()  # roles deleted (without deleting the whole cluster)
    set_aside: tuple[str, ...] = ()  # exported paths made unpublishable
    usage: Usage | None = None  # what the run's tasks used, read right before the delete


def end_run(
    handle: ClusterHandle,
    reason: str,
    *,
    result: RunResult = RunResult.REJECTED,
    remove: Remove = Remove.ALL,
    emit: Emit = log.info,
    status: ClusterStatus | None = None,
    grace_seconds: float | None = None,
    log_lines: int | None = None,
    released: tuple[str, ...] = (),
    sleep: Callable[[float], None] = time.sleep,
) -> Ended:
    """End the run behind ``handle`` (see the module's doc for the steps).

    :param reason: why, in words: logged, and kept as the cluster's deleted reason.
    :param result: whether what the run exported may be published.
    :param remove: what goes.
    :param status: the status the caller already read (saves a read).
    :param grace_seconds: after an accepted run, before the leftovers go (None: the
        handle's ``ps_grace_seconds``).
    :param log_lines: lines copied per task (None: the policy's; 0: none).
    :param released: roles already ended after the success (by the triggerer, which
        copied their logs then): neither waited for, nor copied, nor deleted again.
    """
    backend = handle.backend()
    ref = handle.ref
    leftovers = _leftovers(handle, backend, result, remove, grace_seconds, emit, sleep, released)
    if leftovers is None:
        return Ended()  # nothing of this policy's to remove
    owned, gone = _ownership(handle, backend, reason, emit)
    if not owned:
        return Ended(owned=False)
    if gone:
        return Ended(gone=True)
    status = _copy_logs(backend, handle, result, remove, leftovers, status, log_lines, emit)
    rejected = result is RunResult.REJECTED
    exports = run_exports(backend, ref, emit) if rejected else []
    usage = _usage(backend, ref)
    removed = _remove(handle, backend, reason, remove, leftovers, status, emit)
    set_aside: list[str] = []
    if rejected:
        # Read again after the delete where the logs outlive the tasks (local): a version
        # exported between the first read and the delete is set aside too.
        known = {e.path for e in exports}
        exports += [e for e in run_exports(backend, ref, emit) if e.path not in known]
        set_aside = set_aside_exports(backend, ref, exports, emit)
    return Ended(deleted=remove is Remove.ALL, removed=removed, set_aside=tuple(set_aside), usage=usage)


def _usage(backend: Backend, ref: ClusterRef) -> Usage | None:
    """The tasks' usage while they are all still there (best effort: a read that fails
    costs the figures, never the end of the run)."""
    try:
        return Usage.of(backend.usage(ref))
    except Exception as exc:
        log.warning("could not read the usage of %s: %s", ref.name, exc)
        return None


def _leftovers(
    handle: ClusterHandle,
    backend: Backend,
    result: RunResult,
    remove: Remove,
    grace_seconds: float | None,
    emit: Emit,
    sleep: Callable[[float], None],
    released: tuple[str, ...] = (),
) -> list[str] | None:
    """The roles an accepted run still runs, after their grace period; None when the
    policy removes only those and there is nothing of them to remove."""
    leftovers = (
        [r for r in roles_after_success(handle.mode, list(handle.replicas)) if r not in released]
        if result is RunResult.ACCEPTED
        else []
    )
    ended_by = backend.ends_roles_after_success(handle.layout) if leftovers else None
    if remove is Remove.LEFTOVERS:
        if not leftovers:
            return None
        if ended_by is not None:
            emit(
                f"training succeeded; {ended_by} ends {', '.join(leftovers)} of cluster {handle.ref.name} "
                f"(layout: {handle.layout.value}): nothing to delete"
            )
            return None
    if leftovers and ended_by is None:
        grace = handle.ps_grace_seconds if grace_seconds is None else grace_seconds
        if grace > 0:
            emit(f"training succeeded; deleting {', '.join(leftovers)} in {grace:.0f} s")
            sleep(grace)
    return leftovers


def _remove(
    handle: ClusterHandle,
    backend: Backend,
    reason: str,
    remove: Remove,
    leftovers: list[str],
    status: ClusterStatus | None,
    emit: Emit,
) -> tuple[str, ...]:
    """Delete what the policy removes; the roles deleted, () for the whole cluster."""
    ref = handle.ref
    if remove is Remove.ALL:
        backend.delete(ref, reason)
        emit(f"deleted cluster {ref.name} in {ref.namespace} ({ref.label_selector}); why: {reason}")
        return ()
    removed = tuple(_roles(handle, backend, remove, leftovers, status))
    if removed:
        backend.delete_roles(ref, list(removed))
    if remove is Remove.KEEP_FAILED:
        emit(
            f"kept failed cluster {ref.name} for debugging (on_failure=keep); stopped "
            f"{', '.join(removed) or 'nothing'}; finished Jobs go after their TTL; why: {reason}"
        )
    elif removed:
        emit(f"deleted {', '.join(removed)} of cluster {ref.name}; why: {reason}")
    return removed


def _ownership(handle: ClusterHandle, backend: Backend, reason: str, emit: Emit) -> tuple[bool, bool]:
    """(owned, gone): the cluster's own record of its owner against the handle's. The
    exact identity (dag, task, run, map index) must match: a cluster of another run of
    the same task is not this task instance's, whatever its name."""
    ref = handle.ref
    if not handle.owner_known:  # a handle from before owners were recorded: unchecked
        return True, not backend.exists(ref)
    owner = backend.owner(ref)
    if owner is None:
        return True, not backend.exists(ref)
    if owner.identity == handle.owner:
        return True, False
    mine = "code outside Airflow" if handle.owner is None else _describe(handle)
    emit(
        f"not ending cluster {ref.name} in {ref.namespace} ({reason}): it belongs to "
        f"{owner.describe()}, not to {mine}; it is left as it is"
    )
    return False, False


def _describe(handle: ClusterHandle) -> str:
    return ClusterOwner(handle.owner, None).describe()


def _copy_logs(
    backend: Backend,
    handle: ClusterHandle,
    result: RunResult,
    remove: Remove,
    leftovers: list[str],
    status: ClusterStatus | None,
    log_lines: int | None,
    emit: Emit,
) -> ClusterStatus | None:
    """Copy the logs the policy keeps into the caller's log; returns the status read."""
    if result is RunResult.UNDECIDED or log_lines == 0:
        return status
    if result is RunResult.ACCEPTED:
        tasks = [(r, i) for r in leftovers for i in range(handle.replicas.get(r, 0))]
        if tasks:
            log_task_logs(backend, handle.ref, tasks, emit, log_lines or LEFTOVER_LOG_LINES)
        if remove is Remove.ALL:
            # Nothing of the run stays: its finished tasks' logs (the chief's and the
            # workers' results) go into the task log before their pods go.
            finished = finished_tasks(handle)
            if len(finished) > FINISHED_LOGS_MAX:
                emit(
                    f"copying the logs of {FINISHED_LOGS_MAX} of the {len(finished)} finished tasks "
                    f"before deleting cluster {handle.ref.name}"
                )
            if finished:
                log_task_logs(
                    backend, handle.ref, finished[:FINISHED_LOGS_MAX], emit, log_lines or FINISHED_LOG_LINES
                )
        return status
    try:
        if status is None:
            status = backend.status(handle.ref)
        failed = [(t.role, t.index) for t in status.tasks if t.phase is Phase.FAILED]
        tasks = failed[:FAILED_LOGS_MAX] or [("worker", 0)]
        log_task_logs(backend, handle.ref, tasks, emit, log_lines or FAILED_LOG_LINES)
    except Exception as exc:
        emit(f"could not collect logs before ending the run: {exc}")
    return status


def _roles(
    handle: ClusterHandle,
    backend: Backend,
    remove: Remove,
    leftovers: list[str],
    status: ClusterStatus | None,
) -> list[str]:
    if remove is Remove.LEFTOVERS:
        return leftovers
    if remove is Remove.KEEP_FAILED:
        return [r for r in NEVER_EXITING if r in handle.replicas]
    return running_roles(status if status is not None else backend.status(handle.ref))


def finished_tasks(handle: ClusterHandle) -> list[tuple[str, int]]:
    """The tasks of a succeeded run that finished by themselves (not the leftovers, whose
    logs go with theirs), the chief first: the ones whose logs say what the run did."""
    leftovers = set(roles_after_success(handle.mode, list(handle.replicas)))
    order = sorted((r for r in handle.replicas if r not in leftovers), key=lambda r: (r != "chief", r))
    return [(r, i) for r in order for i in range(handle.replicas[r])]


def running_roles(status: ClusterStatus) -> list[str]:
    """Roles with a task still running or waiting to (a deleted one is neither)."""
    roles = {
        t.role
        for t in status.tasks
        if t.phase is Phase.RUNNING or (t.phase is Phase.PENDING and t.reason != "Deleted")
    }
    return sorted(roles)


def decisive_succeeded(status: ClusterStatus) -> bool:
    """Did the role that decides the training (the chief if there is one, else every
    worker) succeed? Read from the status alone, so it judges a cluster whose spec is
    not at hand (an orphan, a cluster being replaced)."""
    chief = [t for t in status.tasks if t.role == "chief"]
    decisive = chief or [t for t in status.tasks if t.role == "worker"]
    return bool(decisive) and all(t.phase is Phase.SUCCEEDED for t in decisive)


def log_task_logs(
    backend: Backend, ref: ClusterRef, tasks: list[tuple[str, int]], emit: Emit, tail_lines: int = 100
) -> None:
    """Copy task logs into the caller's log, before their pods or processes go away."""
    for role, index in tasks:
        try:
            text = backend.logs(ref, role, index, tail_lines=tail_lines)
        except Exception as exc:
            text = f"(could not read the log: {exc})"
        emit(
            f"----- log of {role}-{index} (last {tail_lines} lines) -----\n{text.rstrip()}\n"
            f"----- end of {role}-{index} -----"
        )


def run_exports(backend: Backend, ref: ClusterRef, emit: Emit) -> list[RunExport]:
    """What the run's tasks exported, read while they are still there (best effort)."""
    try:
        return backend.run_exports(ref)
    except Exception as exc:
        emit(f"WARNING could not find what the failed run exported: {exc}")
        return []


def set_aside_exports(backend: Backend, ref: ClusterRef, exports: list[RunExport], emit: Emit) -> list[str]:
    """Make a rejected run's exports unpublishable; returns the paths set aside. After the
    delete (or after stopping the run's tasks), so no task of the run can export more."""
    if not exports:
        return []
    try:
        discarded = backend.discard_exports(ref, exports)
    except Exception as exc:
        discarded = []
        emit(f"WARNING could not set aside the failed run's exports: {exc}")
    if discarded:
        emit(f"the failed run exported {', '.join(discarded)}; set aside, so it is never published")
    left = [e.path for e in exports if e.path not in discarded]
    if left:
        emit(f"WARNING the failed run's exports {', '.join(left)} were not set aside; do not publish them")
    return list(discarded)
