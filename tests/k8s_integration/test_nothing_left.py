"""Nothing left behind, counted without trusting the labels: every namespaced kind the API
server serves (discovery; Events aside, the API server expires them) is listed in the
namespace before and after a training, in a namespace that sets the rules a production
cluster sets all at once: Pod Security ``restricted`` enforced, a LimitRange, a
ResourceQuota on CPU, memory and pods, and a default-deny NetworkPolicy.

- ``cleanup='all'``: after success the namespace holds exactly what it held before;
- the default (``cleanup='ps'``): whatever is left carries the cluster's label, so the
  sweeper, which finds clusters by that label, can end the retention.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kubernetes import client

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core import naming
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

SKIPPED = {"events", "events.events.k8s.io"}


def _get(api: client.ApiClient, path: str) -> dict:
    resp = api.call_api(
        path,
        "GET",
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return json.loads(resp.data)


def _namespaced_kinds(api: client.ApiClient) -> list[tuple[str, str]]:
    """(path prefix, plural) of every namespaced resource that can be listed."""
    versions = ["/api/v1"] + [
        f"/apis/{g['preferredVersion']['groupVersion']}" for g in _get(api, "/apis")["groups"]
    ]
    out = []
    for prefix in versions:
        group = prefix.split("/")[2] if prefix.startswith("/apis/") else ""
        for r in _get(api, prefix)["resources"]:
            name = r["name"]
            full = f"{name}.{group}" if group else name
            if "/" in name or not r.get("namespaced") or "list" not in r.get("verbs", []) or full in SKIPPED:
                continue
            out.append((prefix, name))
    return out


def _inventory(api: client.ApiClient, namespace: str, kinds) -> dict[str, dict]:
    found = {}
    for prefix, plural in kinds:
        for item in _get(api, f"{prefix}/namespaces/{namespace}/{plural}").get("items") or []:
            found[f"{plural}/{item['metadata']['name']}"] = item
    return found


@pytest.fixture
def production_namespace(k8s_api, tfk_ns) -> str:
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_limit_range(
        tfk_ns,
        {
            "metadata": {"name": "defaults"},
            "spec": {
                "limits": [
                    {
                        "type": "Container",
                        "default": {"cpu": "500m", "memory": "512Mi"},
                        "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
                        "max": {"cpu": "2", "memory": "4Gi"},
                    }
                ]
            },
        },
    )
    core.create_namespaced_resource_quota(
        tfk_ns,
        {
            "metadata": {"name": "team"},
            "spec": {
                "hard": {
                    "pods": "10",
                    "requests.cpu": "4",
                    "limits.cpu": "8",
                    "requests.memory": "8Gi",
                    "limits.memory": "16Gi",
                }
            },
        },
    )
    client.NetworkingV1Api(k8s_api).create_namespaced_network_policy(
        tfk_ns,
        {
            "metadata": {"name": "default-deny"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        },
    )
    _tfk.wait_for(
        "the quota counted",
        lambda: core.read_namespaced_resource_quota("team", tfk_ns).status.used,
        20,
    )
    return tfk_ns


@pytest.mark.parametrize("cleanup", ["all", "ps"])
def test_after_success_only_what_the_policy_names_is_left(k8s_api, production_namespace, tfk_conn, cleanup):
    ns = production_namespace
    kinds = _namespaced_kinds(k8s_api)
    assert ("/api/v1", "configmaps") in kinds and ("/apis/coordination.k8s.io/v1", "leases") in kinds
    before = _inventory(k8s_api, ns, kinds)
    ctx = _tfk.task_context(f"manual__left_{uuid.uuid4().hex[:6]}")
    name = _tfk.cluster_name(ctx)
    data = _tfk.spec(ns, "parameter_server", workers=2, ps=1, evaluator={"replicas": 1})
    with _tfk.PodDriver(k8s_api, ns, name) as driver:
        result = _tfk.make_op(ns, data, cleanup=cleanup).execute(ctx)
    assert result["outcome"] == "succeeded" and not driver.errors, (result, driver.errors)

    def extra() -> dict[str, dict] | None:
        now = _inventory(k8s_api, ns, kinds)
        added = {k: v for k, v in now.items() if k not in before}
        # what the garbage collector is still removing does not count as left
        settled = all(not v["metadata"].get("deletionTimestamp") for v in added.values())
        if cleanup == "all":
            return None if added else {}
        unlabelled = {
            k
            for k, v in added.items()
            if (v["metadata"].get("labels") or {}).get(naming.LABEL_CLUSTER) != name
        }
        return {"added": added, "unlabelled": unlabelled} if settled and not unlabelled else None

    if cleanup == "all":
        # Gone, not only being removed: the garbage collector takes the Jobs' pods after the
        # Jobs, seconds apart on a loaded machine. What is still there after the wait is named.
        deadline = time.monotonic() + 90
        while extra() != {} and time.monotonic() < deadline:
            time.sleep(0.5)
        left = {
            k: bool(v["metadata"].get("deletionTimestamp"))
            for k, v in _inventory(k8s_api, ns, kinds).items()
            if k not in before
        }
        assert not left, f"left after success (key: being deleted): {left}"
    else:
        left = _tfk.wait_for("only labelled objects left", extra, 30, every=0.5)
        assert left["added"], "the policy keeps the finished worker Job and its Service"
        # the sweeper's delete, at the retention's end: by the label, all of it
        KubernetesBackend(conn_id=tfk_conn).delete(ClusterRef(name, ns))
        _tfk.wait_for(
            "the namespace as it was", lambda: not set(_inventory(k8s_api, ns, kinds)) - set(before), 30
        )
