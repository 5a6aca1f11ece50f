"""The lifecycle steps every operator shares: resolve the spec, create or reattach,
apply the previous-run policy. Ending a run, whatever ends it, is :func:`end_run`
(:mod:`airflow_tfk.run.ending`). Backend-agnostic, no Airflow import.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef
from airflow_tfk.core import naming
from airflow_tfk.core.constants import NAME_PREFIX
from airflow_tfk.core.errors import ClusterOwnershipError, SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.ending import RunResult, decisive_succeeded, end_run
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.run.policies import Outcome, evaluate
from airflow_tfk.spec.cluster import TFClusterSpec, load_yaml_mapping
from airflow_tfk.spec.run_policy import PreviousRunPolicy

__all__ = ["apply_previous_run_policy", "check_owner", "create_or_reattach", "end_run", "resolve_spec"]

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
    from airflow_tfk.spec.operator_options import cluster_spec_arg

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
    one made from another spec, is ended and replaced (its exports set aside unless it
    had succeeded: that version may be published already); a cluster of anyone else is
    an error naming its owner, and nothing is touched.
    """
    ref = ClusterRef(spec.name, spec.namespace_name)
    owner = backend.owner(ref)
    handle = ClusterHandle.for_spec(spec, backend, identity)
    if owner is not None:
        check_owner(ref, owner, identity, "reattach to")
        fingerprint = spec.fingerprint()
        if owner.spec_hash is not None and owner.spec_hash != fingerprint:
            emit(
                f"replacing cluster {ref.name}: it was created from another spec "
                f"(spec hash {owner.spec_hash}, this spec {fingerprint})"
            )
            status = backend.status(ref)
            result = RunResult.ACCEPTED if decisive_succeeded(status) else RunResult.REJECTED
            reason = "replaced by a re-run of its task with another spec"
            end_run(handle, reason, result=result, emit=emit, status=status, grace_seconds=0)
    if backend.exists(ref):
        status = backend.status(ref)
        verdict = evaluate(
            spec.mode, {r: s.replicas for r, s in spec.roles().items()}, status, spec.max_lost_workers
        )
        if verdict.outcome is not Outcome.FAILED:
            emit(f"reattaching to existing cluster {ref.name} in {ref.namespace} ({status.summary()})")
            return ref
        emit(f"replacing failed cluster {ref.name}: {verdict.message}")
        end_run(handle, "replaced by a retry of its task", emit=emit, status=status)
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
    :class:`~airflow_tfk.core.errors.CapacityError`. A ``required`` placement is checked
    whatever ``capacity_check`` says: no domain with room for the whole cluster raises.
    Skipped where the backend cannot tell."""
    from airflow_tfk.spec.admission import CapacityCheck

    placement = spec.placement if spec.placement is not None and spec.placement.mode == "required" else None
    if spec.capacity_check is CapacityCheck.OFF and placement is None:
        return
    try:
        snapshot = backend.capacity_snapshot()
    except Exception as exc:
        if spec.capacity_check is not CapacityCheck.OFF or placement is None:
            raise
        level = placement.level
        emit(f"placement: cannot read the nodes to check that one {level} domain has room: {exc}; skipped")
        return
    if snapshot is None:
        emit(f"capacity check: the {backend.kind} backend has no node capacity to compare; skipped")
        return
    from airflow_tfk.core.errors import CapacityError
    from airflow_tfk.spec import capacity

    if placement is not None:
        # Never created half: pods bound in two domains would wait forever for the rest.
        domain, reports = capacity.domains(spec, placement.level, *snapshot)
        if domain is None:
            raise CapacityError(
                capacity.domains_message(spec, placement.level, reports) + "; nothing was created"
            )
        emit(f"placement: {placement.level}={domain} has room for the whole cluster")
    if spec.capacity_check is CapacityCheck.OFF:
        return
    report = capacity.check(spec, *snapshot)
    text = report.message(spec.name)
    if report.fits:
        emit(text)
    elif spec.capacity_check is CapacityCheck.FAIL:
        raise CapacityError(text + " (capacity_check: fail; nothing was created)")
    else:
        emit(f"WARNING {text} (capacity_check: warn; creating it anyway)")


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
                kill_previous(backend, spec, identity, ref, reason, emit)
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"earlier runs still training after {wait_timeout:.0f} s: {names}")
        emit(f"waiting for earlier runs to finish: {names}")
        sleep(poll)


def kill_previous(
    backend: Backend, spec: TFClusterSpec, identity: RunIdentity, ref: ClusterRef, reason: str, emit: Emit
) -> None:
    """End an earlier run's cluster for ``kill_previous``: only a run of this very task
    (its dag and task, as the cluster records them; labels are shortened, the record is
    exact) may be ended by a newer run, and it ends as every killed run does."""
    owner = backend.owner(ref)
    if owner is None:
        return  # ended on its own since it was found
    earlier = owner.identity
    if earlier is None or (earlier.dag_id, earlier.task_id) != (identity.dag_id, identity.task_id):
        emit(
            f"not killing cluster {ref.name}: it belongs to {owner.describe()}, not to an "
            f"earlier run of {identity.dag_id}.{identity.task_id}"
        )
        return
    emit(f"killing cluster {ref.name} of an earlier run: {reason}")
    replicas = {r: s.replicas for r, s in spec.roles().items()}
    handle = ClusterHandle.for_ref(ref, backend, earlier, spec.mode, replicas)
    end_run(handle, reason, emit=emit)
