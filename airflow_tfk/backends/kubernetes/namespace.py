"""What a training's own namespace needs before its pods can start there, read from the
namespace the spec names (``namespace``) and written into the new one
(``<namespace>-<name>``): the image pull secrets and the ServiceAccount are copied, and
the Kueue LocalQueue ``queue_name`` is made, pointing at ``cluster_queue`` or at the
ClusterQueue its namesake in ``namespace`` points at.

Everything is read before anything is created: a source that is missing (or is no image
pull secret) fails naming the spec field. The copies carry the cluster's labels and live
in the training's namespace, so they go when that namespace is deleted with the run; no
other delete path needs to know them. A request plan: see :mod:`.plan`.
"""

from __future__ import annotations

from typing import Any

from airflow_tfk.backends.kubernetes.plan import Plan, Request
from airflow_tfk.core.errors import SpecError
from airflow_tfk.kube.api import BY_KIND, KINDS
from airflow_tfk.spec.cluster import TFClusterSpec

#: the LocalQueue API versions to try, newest first (Kueue >= 0.15 serves v1beta2)
LOCAL_QUEUE_API_VERSIONS = ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")
# Only these may be copied: a pull secret is the registry credential the pods' spec names;
# any other type (a ServiceAccount token, TLS keys) must not leave its namespace this way.
PULL_SECRET_TYPES = ("kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg")
# Set by the API server or kubectl on the source: not the copy's to carry.
_NOT_COPIED = ("kubectl.kubernetes.io/last-applied-configuration",)


def _meta(source: dict[str, Any], name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    src = source.get("metadata") or {}
    annotations = {k: v for k, v in (src.get("annotations") or {}).items() if k not in _NOT_COPIED}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**(src.get("labels") or {}), **labels},
    }
    if annotations:
        meta["annotations"] = annotations
    return meta


def needs_plan(spec: TFClusterSpec, labels: dict[str, str]) -> Plan:
    """The manifests to apply right after the training's namespace (empty without
    ``namespace_per_training``); raises :class:`SpecError` naming the field whose source
    is missing. ``labels``: the cluster's, so the copies are found with it."""
    if not spec.namespace_per_training:
        return []
    source, target = spec.namespace, spec.namespace_name
    out: list[dict[str, Any]] = []
    for i, name in enumerate(spec.image_pull_secrets):
        secret = yield Request(
            "GET",
            BY_KIND["Secret"].item(source, name),
            # a 403 names the field too: the identity may read only the pull secrets its
            # RBAC lists by name (deploy/rbac/namespace-per-training.yaml)
            what=f"image_pull_secrets[{i}]: read Secret {source}/{name}",
        )
        if secret is None:
            raise SpecError(
                f"image_pull_secrets[{i}]",
                f"no Secret {name!r} in namespace {source} to copy into the training's namespace {target}",
                name,
            )
        body = secret[1] or {}
        if body.get("type") not in PULL_SECRET_TYPES:
            raise SpecError(
                f"image_pull_secrets[{i}]",
                f"Secret {source}/{name} is of type {body.get('type')!r}, not an image pull secret "
                f"({' or '.join(PULL_SECRET_TYPES)}): it is not copied into another namespace",
                name,
            )
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": _meta(body, name, target, labels),
                "type": body["type"],
                "data": body.get("data") or {},
            }
        )
    if spec.service_account is not None:
        name = spec.service_account
        found = yield Request(
            "GET", BY_KIND["ServiceAccount"].item(source, name), what=f"read ServiceAccount {source}/{name}"
        )
        if found is None:
            raise SpecError(
                "service_account",
                f"no ServiceAccount {name!r} in namespace {source} to copy into the training's "
                f"namespace {target}",
                name,
            )
        body = found[1] or {}
        account: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(body, name, target, labels),
        }
        # Its annotations (a cloud workload identity) and token policy travel; its secrets
        # and pull secrets name objects of the source namespace, so they do not.
        if "automountServiceAccountToken" in body:
            account["automountServiceAccountToken"] = body["automountServiceAccountToken"]
        out.append(account)
    if spec.queue_name is not None:
        out.append((yield from _local_queue(spec, labels)))
    return out


def _local_queue(spec: TFClusterSpec, labels: dict[str, str]) -> Plan:
    """The LocalQueue ``queue_name`` of the training's namespace, in the API version the
    cluster serves."""
    source, name = spec.namespace, spec.queue_name
    assert name is not None
    for version in LOCAL_QUEUE_API_VERSIONS:
        kind = KINDS[(version, "LocalQueue")]
        served = yield Request("GET", kind.collection(source), {"limit": 1}, forbidden_is_absent=True)
        if served is None:
            continue  # this version is not served (or Kueue is not installed)
        cluster_queue = spec.cluster_queue
        if cluster_queue is None:
            found = yield Request("GET", kind.item(source, name), what=f"read LocalQueue {source}/{name}")
            cluster_queue = ((found or (0, {}))[1] or {}).get("spec", {}).get("clusterQueue")
            if not cluster_queue:
                raise SpecError(
                    "cluster_queue",
                    f"is needed: there is no LocalQueue {name!r} in namespace {source} to take the "
                    "ClusterQueue from for the LocalQueue made in the training's namespace",
                )
        return {
            "apiVersion": version,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": spec.namespace_name, "labels": dict(labels)},
            "spec": {"clusterQueue": cluster_queue},
        }
    raise SpecError(
        "queue_name",
        "needs Kueue's LocalQueue API (kueue.x-k8s.io), which this cluster does not serve, to make "
        "the LocalQueue in the training's own namespace",
        name,
    )
