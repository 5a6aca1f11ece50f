"""A cluster's objects on Kubernetes, as request plans: which kinds make up a cluster, how
it is found by its label, who owns it, and how it is deleted (in order, with the reason
recorded as an Event). Pure plans: :mod:`airflow_tfk.backends.kubernetes.plan` drives them with
the sync or the async client, so the blocking operator and the trigger delete alike.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_tfk.backends.base import ClusterOwner, ClusterRef
from airflow_tfk.backends.kubernetes.plan import Plan, Request
from airflow_tfk.backends.kubernetes.reads import LABEL_DELETED_CLUSTER
from airflow_tfk.backends.kubernetes.status import parse_time
from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.kube.api import BY_KIND
from airflow_tfk.protocol.digits import plain_int

# A cluster is one unit by its label, not by an owner object the garbage collector would
# follow: an ownerReference cannot reach across namespaces nor make a namespaced object own
# the per-training Namespace; it would need the owner's UID before the first apply (two
# passes instead of one idempotent server-side apply); and the clean-up policy removes part
# of a cluster (the PS, then the rest after the retention), which one owner cannot express.
# One selector finds every kind, on both layouts.
# Kinds deleted by ``delete``, in order: controllers first so they stop replacing pods,
# storage last. Only the kinds render() can produce (plus their pods): every kind here is
# a permission the identity Airflow runs as must hold (deploy/rbac/). The per-training
# namespace is deleted after everything in it (see :func:`own_namespace_plan`).
# The NetworkPolicy goes last, so pods still terminating stay isolated; it is not an
# EXISTS kind: a policy alone is no cluster to reattach to (create re-applies it).
# A JobSet (layout: jobset) goes first, so its controller stops making Jobs; where the
# JobSet API is not installed its requests answer 404, which is "none". Every role is an
# Indexed Job, so no other controller kind can hold a cluster's pods.
# A gang's PodGroup goes after the pods that name it; where the API is not served (before
# Kubernetes 1.37, or without its feature gate) its requests answer 404, which is "none".
DELETE_ORDER = ("JobSet", "Job", "Pod", "PodGroup", "Service", "PersistentVolumeClaim", "NetworkPolicy")
# Kinds an identity may lack the rights to on a cluster that serves them (its RBAC predates
# them): a 403 is "none", since an identity that may not delete them could not have made
# them, and every other training's clean-up must not fail on them.
MAY_BE_FORBIDDEN = frozenset({"PodGroup"})
EXISTS_KINDS = ("Pod", "Job", "JobSet", "Service", "PersistentVolumeClaim")
# Where the owner annotations are read from: the objects every layout has, pods last,
# then what outlives the Jobs (their TTL) until the sweeper ends the retention.
OWNER_KINDS = ("Job", "Service", "PersistentVolumeClaim", "Pod", "NetworkPolicy")
# What a cluster is found by (the sweeper, ``clusters list``): the Jobs while it has any,
# and what stays after their TTL removed them. Pods always have a Job (or JobSet) above.
CLUSTER_KINDS = ("Job", "Service", "PersistentVolumeClaim", "NetworkPolicy")
BACKGROUND = {"propagationPolicy": "Background"}
EVENT_REASON_DELETED = "TFClusterDeleted"


def owner_plan(ref: ClusterRef) -> Plan:
    """The owner annotations of the first labelled object found (controllers first; the
    per-training namespace, which carries them too, when nothing is left in it)."""
    item = yield from first_labelled(ref, OWNER_KINDS)
    if item is None:
        item = yield from own_namespace_plan(ref)
    if item is None:
        return None
    meta = item.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    max_duration = annotations.get(naming.ANNOTATION_MAX_DURATION, "")
    return ClusterOwner(
        RunIdentity.from_annotations(annotations),
        annotations.get(naming.ANNOTATION_SPEC_HASH),
        parse_time(meta.get("creationTimestamp")),
        plain_int(max_duration),
    )


def exists_plan(ref: ClusterRef) -> Plan:
    if (yield from first_labelled(ref, EXISTS_KINDS)) is not None:
        return True
    return bool((yield from own_namespace_plan(ref)))


def own_namespace_plan(ref: ClusterRef) -> Plan:
    """The cluster's per-training namespace, or None: ``ref.namespace`` if it carries
    the cluster's label. One GET of that namespace, never a list of all namespaces:
    an identity confined to its namespace by a Role may not read it (403), and then
    it cannot have created it either."""
    result = yield Request("GET", BY_KIND["Namespace"].item(None, ref.namespace), forbidden_is_absent=True)
    ns = result[1] if result else None
    labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
    ours = (
        labels.get(naming.LABEL_CLUSTER) == ref.name
        and labels.get(naming.LABEL_MANAGED_BY) == naming.MANAGED_BY
    )
    return ns if ours else None


def clusters_plan(namespace: str | None) -> Plan:
    """Every cluster with an object left in ``namespace`` (None: everywhere), per-training
    namespaces included when looking everywhere (a namespace left empty is a cluster too)."""
    found: dict[ClusterRef, None] = {}
    query = {"labelSelector": f"{naming.LABEL_CLUSTER},{naming.MANAGED_SELECTOR}"}
    for name in CLUSTER_KINDS:
        kind = BY_KIND[name]
        path = kind.everywhere() if namespace is None else kind.collection(namespace)
        result = yield Request("GET", path, query)
        for item in (result[1] or {}).get("items") or [] if result else []:
            meta = item["metadata"]
            found[ClusterRef(meta["labels"][naming.LABEL_CLUSTER], meta["namespace"])] = None
    if namespace is None:
        # An identity confined to namespaces by Roles may not list them (403): then it
        # cannot have created a per-training namespace either.
        result = yield Request("GET", BY_KIND["Namespace"].collection(None), query, forbidden_is_absent=True)
        for item in (result[1] or {}).get("items") or [] if result else []:
            meta = item["metadata"]
            found[ClusterRef(meta["labels"][naming.LABEL_CLUSTER], meta["name"])] = None
    return list(found)


def delete_roles_plan(ref: ClusterRef, roles: list[str]) -> Plan:
    for role in roles:
        name = naming.role_resource_name(ref.name, role)
        yield Request("DELETE", BY_KIND["Job"].item(ref.namespace, name), BACKGROUND)
        yield Request("DELETE", BY_KIND["Service"].item(ref.namespace, name), BACKGROUND)


def delete_plan(ref: ClusterRef, reason: str = "") -> Plan:
    if reason:
        yield Request(
            "POST",
            BY_KIND["Event"].collection(ref.namespace),
            None,
            deleted_event(ref, reason),
            optional=True,
        )
    query = {"labelSelector": ref.label_selector, **BACKGROUND}
    deleted: list[str] = []
    for name in DELETE_ORDER:
        kind = BY_KIND[name]
        if kind.collection_delete:
            result = yield Request(
                "DELETE", kind.collection(ref.namespace), query, forbidden_is_absent=name in MAY_BE_FORBIDDEN
            )
            items = (result[1] or {}).get("items") or [] if result else []
            if items:
                deleted.append(f"{len(items)} {kind.plural}")
            continue
        namespace = ref.namespace if kind.namespaced else None
        result = yield Request("GET", kind.collection(namespace), {"labelSelector": ref.label_selector})
        items = (result[1] or {}).get("items") or [] if result else []
        for item in items:
            yield Request("DELETE", kind.item(namespace, item["metadata"]["name"]), BACKGROUND)
        if items:
            deleted.append(f"{len(items)} {kind.plural}")
    if (yield from own_namespace_plan(ref)) is not None:
        yield Request("DELETE", BY_KIND["Namespace"].item(None, ref.namespace), BACKGROUND)
        deleted.append(f"namespace {ref.namespace}")
    return ", ".join(deleted)


def served_plan(kind_name: str) -> Plan:
    """Whether the API server serves ``kind_name`` (one discovery GET of its group version,
    which every authenticated identity may read): a resource missing there is what an older
    cluster, or one without the kind's feature gate, answers."""
    kind = BY_KIND[kind_name]
    result = yield Request("GET", kind.prefix)
    resources = ((result[1] if result else None) or {}).get("resources") or []
    return any(r.get("name") == kind.plural for r in resources)


def first_labelled(ref: ClusterRef, kinds: tuple[str, ...]) -> Plan:
    """The first object with the cluster's label, trying ``kinds`` in order (one GET of
    at most one item each), or None."""
    for kind in kinds:
        result = yield Request(
            "GET", BY_KIND[kind].collection(ref.namespace), {"labelSelector": ref.label_selector, "limit": 1}
        )
        items = (result[1] or {}).get("items") or [] if result else []
        if items:
            return items[0]
    return None


def deleted_event(ref: ClusterRef, reason: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{ref.name}.deleted.{time.time_ns():x}",
            "namespace": ref.namespace,
            "labels": {LABEL_DELETED_CLUSTER: ref.name},
        },
        "involvedObject": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": naming.role_resource_name(ref.name, "worker"),
            "namespace": ref.namespace,
        },
        "reason": EVENT_REASON_DELETED,
        "message": reason[:1024],
        "type": "Normal",
        "source": {"component": "airflow-tfk"},
        "reportingComponent": "airflow-tfk",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
