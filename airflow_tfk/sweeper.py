"""The orphan sweeper: delete clusters nobody is waiting on any more.

A cluster is an orphan when it still runs something (a task Running or Pending) and

- its owning task instance is no longer active (finished, removed, or gone: the process
  that would have cleaned up was SIGKILLed, the worker lost, the DAG deleted), or
- its cluster-side deadline (creation + ``max_duration_seconds``) has passed. This is how
  the PS StatefulSet, which Kubernetes cannot time out, gets a deadline too.

Finished clusters (every task exited) are left alone: finished Jobs carry
``ttlSecondsAfterFinished``, and a run kept for debugging (``on_failure='keep'``) stays
until then. Clusters created outside Airflow are only swept past their deadline.

Pure logic over the :class:`Backend` interface and a ``ti_state`` callable, so it runs
the same on both backends and in tests; :class:`~airflow_tfk.operators.sweeper.TFOrphanSweeperOperator`
asks Airflow for the states.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef
from airflow_tfk.naming import RunIdentity
from airflow_tfk.status import Phase

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


def _still_running(backend: Backend, ref: ClusterRef) -> bool:
    status = backend.status(ref)
    return any(
        t.phase is Phase.RUNNING or (t.phase is Phase.PENDING and t.reason != "Deleted") for t in status.tasks
    )


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
    now = time.time() if now is None else now
    results = []
    for ref in backend.clusters(namespace):
        owner = backend.owner(ref)
        if owner is None:
            continue
        reason = orphan_reason(owner, ti_state, now)
        if reason is None or not _still_running(backend, ref):
            continue
        if dry_run:
            emit(f"orphaned cluster {ref.name} in {ref.namespace}: {reason} (dry run, kept)")
        else:
            backend.delete(ref, f"deleted by the orphan sweeper: {reason}")
            emit(f"deleted orphaned cluster {ref.name} in {ref.namespace}: {reason}")
        results.append(SweepResult(ref, reason, not dry_run))
    if not results:
        emit("no orphaned clusters")
    return results
