"""The orphan sweeper: delete clusters nobody is waiting on any more.

A cluster is an orphan when it still runs something (a task Running or Pending) and

- its owning task instance is no longer active (finished, removed, or gone: the process
  that would have cleaned up was SIGKILLed, the worker lost, the DAG deleted), or
- its cluster-side deadline (creation + ``max_duration_seconds``) has passed. Every Job
  already stops there by itself (``activeDeadlineSeconds``); this is the deadline of what
  Kubernetes cannot time out: the local backend's processes.

A training whose decisive role (the chief, else every worker) succeeded, and whose task
instance is still active or succeeded, loses only what still runs (the PS, and the workers
in ``parameter_server`` mode): its finished tasks stay until their TTL, so a retry of its
task finds it succeeded and does not retrain.

Any other orphan is deleted whole, and what it exported is set aside unless its task
instance succeeded: a run nobody accepted (its task failed, was killed, or is gone) never
leaves a publishable version behind, even when its cluster, orphaned, went on to finish
and export after the task died. That holds for a cluster whose every task has exited too.

A cluster whose training failed and whose every task exited is left alone for its
retention: what the clean-up policy keeps (the finished Jobs and their logs, the Services,
the NetworkPolicy, the claims made from ``size:``, a per-training namespace) stays until the
finished Jobs reach ``ttl_seconds_after_finished`` and Kubernetes deletes them. A run kept
for debugging (``on_failure='keep'``) stays that long too (its exports were set aside when
it was kept), and so does a succeeded run's ``cleanup='ps'`` remainder.

When the retention is over, nothing of the run's tasks is left but what outlives the Jobs;
the sweeper then deletes all of that as one unit, by the cluster's label, namespace
included. The Jobs' TTL is the clock, so the retention holds even while no sweeper runs,
and the kept logs (the pods) and the rest end together. Clusters created outside Airflow
are only swept past their deadline.

Pure logic over the :class:`Backend` interface and a ``ti_state`` callable, so it runs
the same on both backends and in tests; :class:`~airflow_tfk.operators.sweeper.TFSweepOrphansOperator`
asks Airflow for the states.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef
from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.core.status import ClusterStatus
from airflow_tfk.run.ending import Remove, RunResult, decisive_succeeded, end_run, running_roles
from airflow_tfk.run.handle import ClusterHandle

log = logging.getLogger(__name__)

# Task-instance states in which the task (or its next try) still owns its cluster.
ACTIVE_STATES = frozenset(
    {"running", "deferred", "queued", "scheduled", "up_for_retry", "up_for_reschedule", "restarting"}
)


@dataclass(frozen=True)
class SweepResult:
    ref: ClusterRef
    reason: str
    deleted: bool


def orphan_reason(
    owner: ClusterOwner, ti_state: Callable[[RunIdentity], str | None], now: float
) -> str | None:
    """Why the cluster of ``owner`` is an orphan, or None when it is not."""
    deadline = owner.deadline
    if deadline is not None and now >= deadline:
        return f"past its deadline (max_duration_seconds={owner.max_duration_seconds})"
    if owner.identity is None:
        return None  # not Airflow's: only its deadline applies
    state = ti_state(owner.identity)
    if state is not None and str(state).lower() in ACTIVE_STATES:
        return None
    return f"its task instance ({owner.describe()}) is {state or 'gone'}"


def _owner_succeeded(owner: ClusterOwner, ti_state: Callable[[RunIdentity], str | None]) -> bool:
    return owner.identity is not None and str(ti_state(owner.identity) or "").lower() == "success"


def _rejected(owner: ClusterOwner, ti_state: Callable[[RunIdentity], str | None]) -> bool:
    """An Airflow run that nobody will accept any more: its task instance is neither
    active (no try of it will reattach) nor succeeded (it failed, was killed, or is gone)."""
    if owner.identity is None:
        return False
    state = str(ti_state(owner.identity) or "").lower()
    return state != "success" and state not in ACTIVE_STATES


def _sweep_one(
    backend: Backend,
    ref: ClusterRef,
    owner: ClusterOwner,
    ti_state: Callable[[RunIdentity], str | None],
    reason: str,
    dry_run: bool,
    emit: Callable[[str], None],
) -> SweepResult | None:
    """Sweep one orphan (see the module's doc); None when there is nothing to do."""
    # The cluster's own record says whose it is; end_run checks it still does.
    handle = ClusterHandle.for_ref(ref, backend, owner.identity)
    status = backend.status(ref)
    if not status.exists:
        # The end of a retention: the run's Jobs are gone (their TTL, or a partial delete),
        # and what outlived them goes as one unit. No task is left whose logs or exports
        # could be read.
        why = f"its tasks are gone (ttl_seconds_after_finished) and {reason}"
        result = RunResult.ACCEPTED if _owner_succeeded(owner, ti_state) else RunResult.UNDECIDED
        return _end(handle, "the rest of", why, f"retention over: {why}", dry_run, emit, result=result)
    running = running_roles(status)
    finished = decisive_succeeded(status)
    rejected = finished and _rejected(owner, ti_state)
    if not running and not rejected:
        return None  # a failed run left to its TTL, or a finished one its task accepted
    if finished and not rejected:
        # A finished training keeps its finished tasks (until their TTL): a retry of its
        # task must find it succeeded, not retrain and export a second version.
        what = f"{', '.join(running)} of finished"
        return _end(
            handle,
            what,
            reason,
            reason,
            dry_run,
            emit,
            result=RunResult.ACCEPTED,
            remove=Remove.RUNNING,
            status=status,
        )
    what = "finished, unaccepted" if finished else "orphaned"
    # Only a run whose task instance succeeded keeps what it exported.
    result = RunResult.ACCEPTED if _owner_succeeded(owner, ti_state) else RunResult.REJECTED
    return _end(handle, what, reason, f"{what}: {reason}", dry_run, emit, result=result, status=status)


def _end(
    handle: ClusterHandle,
    what: str,
    reason: str,
    said: str,
    dry_run: bool,
    emit: Callable[[str], None],
    *,
    result: RunResult,
    remove: Remove = Remove.ALL,
    status: ClusterStatus | None = None,
) -> SweepResult:
    """End ``what`` of the cluster behind ``handle`` through :func:`end_run`, or in a dry
    run only say so. ``said`` is the reason end_run logs and keeps on the cluster. No logs
    are copied and no grace is waited: the run's own task no longer ends it (it is gone,
    or the deadline passed), and one cluster must not hold up the sweep of the others."""
    ref = handle.ref
    if dry_run:
        emit(f"would delete {what} cluster {ref.name} in {ref.namespace}: {reason} (dry run, kept)")
        return SweepResult(ref, reason, False)
    ended = end_run(
        handle,
        f"the orphan sweeper: {said}",
        result=result,
        remove=remove,
        emit=emit,
        status=status,
        grace_seconds=0,
        log_lines=0,
    )
    return SweepResult(ref, reason, ended.deleted or bool(ended.removed))


def sweep(
    backend: Backend,
    namespace: str | None,
    ti_state: Callable[[RunIdentity], str | None],
    *,
    dry_run: bool = False,
    now: float | None = None,
    emit: Callable[[str], None] = log.info,
) -> list[SweepResult]:
    """Delete (or, with ``dry_run``, only report) every orphaned cluster in ``namespace``
    (None: every namespace the backend can see)."""
    if namespace is not None and not (isinstance(namespace, str) and naming.is_dns1123_label(namespace)):
        raise SpecError("namespace", "must be a namespace name (DNS-1123 label) or None", namespace)
    now = time.time() if now is None else now
    results = []
    for ref in backend.clusters(namespace):
        owner = backend.owner(ref)
        if owner is None:
            continue
        reason = orphan_reason(owner, ti_state, now)
        if reason is None:
            continue
        result = _sweep_one(backend, ref, owner, ti_state, reason, dry_run, emit)
        if result is not None:
            results.append(result)
    if not results:
        emit("no orphaned clusters")
    return results
