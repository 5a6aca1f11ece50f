"""What Kueue says about a queued cluster: its Workloads' admission state, as one line
for the task log. Pure: the backend lists the Workloads.

Kueue makes one Workload per object it manages (the JobSet; or, in the Jobs layout, each
Job, the PS Job included), owned by that object. While the cluster waits, the Workload's
``QuotaReserved`` condition is False with Kueue's reason and message, e.g. "couldn't
assign flavors to pod set worker: insufficient quota for cpu in flavor default, 4 more
needed".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.spec.cluster import ROLES

#: the Workload API versions to try, newest first (Kueue >= 0.15 serves v1beta2)
WORKLOAD_API_VERSIONS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")


def _owned_by_cluster(workload: Mapping[str, Any], cluster: str) -> bool:
    names = {naming.role_resource_name(cluster, r) for r in ROLES}
    for owner in (workload.get("metadata") or {}).get("ownerReferences") or []:
        kind, name = owner.get("kind"), owner.get("name")
        if (kind == "JobSet" and name == cluster) or (kind == "Job" and name in names):
            return True
    return False


def _condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (workload.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def queue_message(workloads: Iterable[Mapping[str, Any]], cluster: str) -> str | None:
    """One line on the cluster's Workloads still waiting for Kueue; None when none waits
    (admitted, finished, or not queued at all)."""
    waiting = []
    for wl in workloads:
        if not _owned_by_cluster(wl, cluster):
            continue
        admitted = _condition(wl, "Admitted")
        finished = _condition(wl, "Finished")
        if (admitted or {}).get("status") == "True" or (finished or {}).get("status") == "True":
            continue
        queue = (wl.get("spec") or {}).get("queueName") or "?"
        owners: list[Mapping[str, Any]] = (wl.get("metadata") or {}).get("ownerReferences") or []
        owner: Mapping[str, Any] = owners[0] if owners else {}
        reserved = _condition(wl, "QuotaReserved") or {}
        why = reserved.get("message") or reserved.get("reason") or "waiting for Kueue to look at it"
        if reserved.get("status") == "True" and admitted is not None:
            detail = admitted.get("message") or admitted.get("reason")
            why = f"quota reserved, waiting for admission checks: {detail}"
        waiting.append(
            f"{owner.get('kind', 'workload')} {owner.get('name', '?')} queued in LocalQueue {queue}: {why}"
        )
    if not waiting:
        return None
    return "; ".join(sorted(waiting))
