"""The lifecycle steps every operator shares: resolve the spec, create or reattach,
finish after success, tear down after failure. Backend-agnostic, no Airflow import.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_tfk import naming
from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef, RunExport
from airflow_tfk.constants import NAME_PREFIX
from airflow_tfk.errors import ClusterOwnershipError, SpecError
from airflow_tfk.handle import ClusterHandle
from airflow_tfk.naming import RunIdentity
from airflow_tfk.policies import Outcome, evaluate, roles_after_success
from airflow_tfk.run_policy import PreviousRunPolicy
from airflow_tfk.spec import TFClusterSpec, load_yaml_mapping
from airflow_tfk.status import ClusterStatus, Phase

log = logging.getLogger(__name__)
Emit = Callable[[str], None]


def resolve_spec(
    cluster_spec: TFClusterSpec | Mapping[str, Any] | str,
    identity: RunIdentity | None,
    name_prefix: str = NAME_PREFIX,
) -> TFClusterSpec:
    """A validated spec. A spec without a name gets the deterministic name of its task
    instance, so a retry or restart finds the same cluster.

    ``cluster_spec`` may be a spec, a mapping, or YAML text.
    """
    from airflow_tfk.operator_args import cluster_spec_arg

    cluster_spec_arg(cluster_spec)
    if isinstance(cluster_spec, TFClusterSpec):
        return cluster_spec
    if isinstance(cluster_spec, str):
        cluster_spec = load_yaml_mapping(cluster_spec)
    data = dict(cluster_spec)
    if not data.get("name"):
        if identity is None:
            raise SpecError("name", "is required outside an Airflow task")
        data["name"] = identity.cluster_name(name_prefix)
    return TFClusterSpec.from_dict(data)


def check_owner(ref: ClusterRef, owner: ClusterOwner, identity: RunIdentity | None, doing: str) -> None:
    """Raise :class:`ClusterOwnershipError` unless ``identity`` owns the cluster.

    The exact identity (dag, task, run, map index) must match: a cluster of another run
    of the same task is not this task instance's, whatever its name.
    """
    if owner.identity == identity:
        return
    me = "this code outside Airflow" if identity is None else "this task instance"
    raise ClusterOwnershipError(
        ref.name,
        f"cluster {ref.name} in namespace {ref.namespace} already exists and belongs to "
        f"{owner.describe()}, not to {me}; refusing to {doing} it. Delete that cluster "
        "first, or give this training another name",
    )


def create_or_reattach(
    backend: Backend, spec: TFClusterSpec, identity: RunIdentity | None, emit: Emit = log.info
) -> ClusterRef:
    """Create the cluster, or reattach to the one a previous try of this task left.

    Only a cluster of this very task instance (identity) made from this very spec
    (fingerprint) is reused, and only while it is running or succeeded. A failed one, or
    one made from another spec, is deleted and replaced; a cluster of anyone else is an
    error naming its owner, and nothing is touched.
    """
    ref = ClusterRef(spec.name, spec.namespace_name)
    owner = backend.owner(ref)
    if owner is not None:
        check_owner(ref, owner, identity, "reattach to")
        fingerprint = spec.fingerprint()
        if owner.spec_hash is not None and owner.spec_hash != fingerprint:
            emit(
                f"replacing cluster {ref.name}: it was created from another spec "
                f"(spec hash {owner.spec_hash}, this spec {fingerprint})"
            )
            backend.delete(ref, "replaced by a re-run of its task with another spec")
    if backend.exists(ref):
        status = backend.status(ref)
        verdict = evaluate(
            spec.mode, {r: s.replicas for r, s in spec.roles().items()}, status, spec.max_lost_workers
        )
        if verdict.outcome is not Outcome.FAILED:
            emit(f"reattaching to existing cluster {ref.name} in {ref.namespace} ({status.summary()})")
            return ref
        emit(f"replacing failed cluster {ref.name}: {verdict.message}")
        exports = run_exports(backend, ref, emit)
        backend.delete(ref, "replaced by a retry of its task")
        set_aside_exports(backend, ref, exports, emit)
    backend.preflight(spec, identity)  # a failed check creates nothing and says only that
    check_capacity(backend, spec, emit)
    emit(
        f"creating cluster {ref.name} in {ref.namespace} on the {backend.kind} backend: "
        f"{', '.join(f'{r} x{s.replicas}' for r, s in spec.roles().items())}, mode {spec.mode.value}"
    )
    return backend.create(spec, identity)


def check_capacity(backend: Backend, spec: TFClusterSpec, emit: Emit) -> None:
    """``capacity_check``: compare the cluster's requests with the nodes' free capacity
    before anything is created; ``warn`` logs a shortfall, ``fail`` raises
    :class:`~airflow_tfk.errors.CapacityError`. Skipped where the backend cannot tell."""
    from airflow_tfk.admission import CapacityCheck

    if spec.capacity_check is CapacityCheck.OFF:
        return
    snapshot = backend.capacity_snapshot()
    if snapshot is None:
        emit(f"capacity check: the {backend.kind} backend has no node capacity to compare; skipped")
        return
    from airflow_tfk import capacity
    from airflow_tfk.errors import CapacityError

    report = capacity.check(spec, *snapshot)
    text = report.message(spec.name)
    if report.fits:
        emit(text)
    elif spec.capacity_check is CapacityCheck.FAIL:
        raise CapacityError(text + " (capacity_check: fail; nothing was created)")
    else:
        emit(f"WARNING {text} (capacity_check: warn; creating it anyway)")


def log_task_logs(
    backend: Backend, ref: ClusterRef, tasks: list[tuple[str, int]], emit: Emit, tail_lines: int = 100
) -> None:
    """Copy task logs into the Airflow log, before their pods or processes go away."""
    for role, index in tasks:
        try:
            text = backend.logs(ref, role, index, tail_lines=tail_lines)
        except Exception as exc:
            text = f"(could not read the log: {exc})"
        emit(
            f"----- log of {role}-{index} (last {tail_lines} lines) -----\n{text.rstrip()}\n"
            f"----- end of {role}-{index} -----"
        )


def cleanup_after_success(
    handle: ClusterHandle,
    emit: Emit = log.info,
    grace_seconds: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """After the grace period, delete the roles that never exit by themselves (PS; workers
    in ``parameter_server`` mode), copying their logs first. Returns the deleted roles:
    none where the cluster ends them itself (a JobSet's success policy)."""
    backend = handle.backend()
    roles = roles_after_success(handle.mode, list(handle.replicas))
    if not roles:
        return []
    ended_by = backend.ends_roles_after_success(handle.layout)
    if ended_by is not None:
        emit(
            f"training succeeded; {ended_by} ends {', '.join(roles)} of cluster {handle.ref.name} "
            f"(layout: {handle.layout.value}): nothing to delete"
        )
        return []
    grace = handle.ps_grace_seconds if grace_seconds is None else grace_seconds
    if grace > 0:
        emit(f"training succeeded; deleting {', '.join(roles)} in {grace:.0f} s")
        sleep(grace)
    if not owns(handle, emit):
        return []
    tasks = [(r, i) for r in roles for i in range(handle.replicas.get(r, 0))]
    log_task_logs(backend, handle.ref, tasks, emit, tail_lines=50)
    backend.delete_roles(handle.ref, roles)
    emit(f"deleted {', '.join(roles)} of cluster {handle.ref.name}")
    return roles


def teardown_after_failure(
    handle: ClusterHandle, status: ClusterStatus | None, emit: Emit = log.info, reason: str = ""
) -> bool:
    """Copy the logs of failed (or, if none, decisive) tasks, then delete everything.

    Only a cluster that is still the handle owner's; True if it was deleted.
    """
    if not owns(handle, emit):
        return False
    backend = handle.backend()
    try:
        if status is None:
            status = backend.status(handle.ref)
        failed = [(t.role, t.index) for t in status.tasks if t.phase is Phase.FAILED]
        log_task_logs(backend, handle.ref, failed[:5] or [("worker", 0)], emit)
    except Exception as exc:
        emit(f"could not collect logs before deleting: {exc}")
    exports = run_exports(backend, handle.ref, emit)
    deleted = delete_cluster(handle, emit, reason)
    set_aside_exports(backend, handle.ref, exports, emit)
    return deleted


def run_exports(backend: Backend, ref: ClusterRef, emit: Emit) -> list[RunExport]:
    """What the run's tasks exported, read while they are still there (best effort)."""
    try:
        return backend.run_exports(ref)
    except Exception as exc:
        emit(f"WARNING could not find what the failed run exported: {exc}")
        return []


def set_aside_exports(backend: Backend, ref: ClusterRef, exports: list[RunExport], emit: Emit) -> None:
    """Make a failed run's exports unpublishable. After the delete (or after stopping
    the run's tasks), so no task of the run can export anything more."""
    if not exports:
        return
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


def keep_after_failure(handle: ClusterHandle, emit: Emit = log.info) -> list[str]:
    """``on_failure='keep'``: copy the failed tasks' logs, stop only what never exits (PS,
    evaluator), keep the rest for debugging until the Jobs' TTL; returns the roles stopped.
    A failed run's exports are set aside all the same."""
    if not owns(handle, emit):
        return []
    backend = handle.backend()
    status = backend.status(handle.ref)
    failed = [(t.role, t.index) for t in status.tasks if t.phase is Phase.FAILED]
    log_task_logs(backend, handle.ref, failed[:5] or [("worker", 0)], emit)
    roles: list[str] = [r for r in ("ps", "evaluator") if r in handle.replicas]
    exports = run_exports(backend, handle.ref, emit)
    if roles:
        backend.delete_roles(handle.ref, roles)
    set_aside_exports(backend, handle.ref, exports, emit)
    emit(
        f"kept failed cluster {handle.ref.name} for debugging (on_failure=keep); "
        f"stopped {', '.join(roles) or 'nothing'}; finished Jobs go after their TTL"
    )
    return roles


def owns(handle: ClusterHandle, emit: Emit = log.info) -> bool:
    """Does the cluster behind ``handle`` still belong to the handle's owner? A cluster
    that is gone counts as owned (deleting it again is harmless)."""
    if not handle.owner_known:
        return True
    owner = handle.backend().owner(handle.ref)
    if owner is None or owner.identity == handle.owner:
        return True
    emit(
        f"not deleting cluster {handle.ref.name}: it now belongs to {owner.describe()}, "
        "not to the task instance that created this handle"
    )
    return False


def delete_cluster(handle: ClusterHandle, emit: Emit = log.info, reason: str = "") -> bool:
    """Delete the cluster if it is still the handle owner's; True if it was deleted."""
    if not owns(handle, emit):
        return False
    handle.backend().delete(handle.ref, reason)
    emit(f"deleted cluster {handle.ref.name} ({handle.ref.label_selector})")
    return True


def previous_runs(backend: Backend, spec: TFClusterSpec, identity: RunIdentity) -> list[ClusterRef]:
    """Alive clusters of other runs of this dag's task."""
    labels = {k: v for k, v in identity.labels().items() if k in (naming.LABEL_DAG, naming.LABEL_TASK)}
    namespace = None if spec.namespace_per_training else spec.namespace_name
    replicas = {r: s.replicas for r, s in spec.roles().items()}
    alive = []
    for ref in backend.find(namespace, labels):
        if ref.name == spec.name:
            continue
        if evaluate(spec.mode, replicas, backend.status(ref)).outcome is Outcome.RUNNING:
            alive.append(ref)
    return alive


def apply_previous_run_policy(
    backend: Backend,
    spec: TFClusterSpec,
    identity: RunIdentity,
    policy: PreviousRunPolicy,
    emit: Emit = log.info,
    wait_timeout: float | None = None,
    poll: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Apply ``policy``; returns False when this run must be skipped."""
    policy = PreviousRunPolicy(policy)
    if policy is PreviousRunPolicy.ALLOW:
        return True
    deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
    while True:
        alive = previous_runs(backend, spec, identity)
        if not alive:
            return True
        names = ", ".join(r.name for r in alive)
        if policy is PreviousRunPolicy.SKIP:
            emit(f"an earlier run is still training ({names}); skipping this run")
            return False
        if policy is PreviousRunPolicy.KILL_PREVIOUS:
            reason = (
                f"killed by the newer run {identity.run_id} of {identity.dag_id}."
                f"{identity.task_id} (previous_run_policy=kill_previous)"
            )
            for ref in alive:
                emit(f"killing cluster {ref.name} of an earlier run: {reason}")
                backend.delete(ref, reason)
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"earlier runs still training after {wait_timeout:.0f} s: {names}")
        emit(f"waiting for earlier runs to finish: {names}")
        sleep(poll)
