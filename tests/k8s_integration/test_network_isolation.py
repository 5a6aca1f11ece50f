"""Network isolation against the real API server.

- Every mode's NetworkPolicy (open and restricted egress) is admitted under strict field
  validation (server-side dry run), and created with the cluster.
- The API server itself evaluates each policy's selectors: the pods it selects (and
  admits to the TF port) are exactly the cluster's pods, none of another cluster running
  beside it in the same namespace.
- Deleting one cluster removes its policy and leaves the other cluster's alone; nothing
  is left at the end.
- TF Serving and TensorBoard policies are admitted; the API server's address is read
  from the ``kubernetes`` EndpointSlice by the provider's least-privilege identity with
  deploy/rbac/apiserver-address.yaml (no 403), and without that grant the error names
  the field before anything is created.

Enforcement is not tested here: KWOK nodes have no network plugin (see
docs/network-isolation.md).
"""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.utils import create_from_dict

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.kube.api import SyncApi
from airflow_tfk.render.manifests import render
from airflow_tfk.serving._proxy_source import api_server_cidrs
from airflow_tfk.serving.render import render_serving
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.tensorboard.render import render_tensorboard
from k8s_integration import _tfk
from tests.helpers import rbac_render

rbac = rbac_render()  # deploy/rbac/render.py

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

RESTRICTED = {
    "egress": "restricted",
    "egress_to": [
        {"cidr": "10.20.0.0/16", "except_cidrs": ["10.20.1.0/24"], "ports": [443]},
        {"namespace_labels": {"kubernetes.io/metadata.name": "datasets"}, "pod_labels": {"app": "minio"}},
    ],
}


def _call(api, method: str, path: str, body=None, query=None):
    resp = api.call_api(
        path,
        method,
        query_params=list((query or {}).items()),
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return resp, json.loads(resp.data or b"{}")


def _dry_run_strict(api, manifest: dict) -> None:
    ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    resp, _ = _call(
        api,
        "PATCH",
        f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}",
        manifest,
        {"fieldManager": "airflow-tfk", "fieldValidation": "Strict", "dryRun": "All"},
    )
    assert resp.status in (200, 201) and not resp.getheader("Warning"), resp.getheader("Warning")


def _selector(match_labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


def _pod_names(api, ns: str, selector: str) -> set[str]:
    return {
        p.metadata.name for p in client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=selector).items
    }


def _policy(api, ns: str, cluster: str) -> dict | None:
    name = naming.network_policy_name(cluster)
    try:
        return client.NetworkingV1Api(api).read_namespaced_network_policy(name, ns).to_dict()
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_every_mode_is_admitted_and_selects_exactly_its_own_pods(k8s_api, tfk_ns, tfk_conn) -> None:
    backend = KubernetesBackend(conn_id=tfk_conn)
    identity = RunIdentity("k8s_it", "train", "scheduled__2026-01-01T00:00:00+00:00", -1)
    specs = {
        "between_graph": _tfk.spec(tfk_ns, "between_graph", workers=3, ps=2, name="iso-bg"),
        "parameter_server": _tfk.spec(
            tfk_ns, "parameter_server", workers=2, ps=1, name="iso-ps", evaluator={"replicas": 1}
        ),
        "all_reduce": _tfk.spec(
            tfk_ns, "all_reduce", workers=3, ps=0, name="iso-ar", network_policy=RESTRICTED
        ),
    }
    # Strict server-side dry run of every variant (each mode, open and restricted egress).
    for data in specs.values():
        for policy in (None, RESTRICTED):
            spec = TFClusterSpec.from_dict({**data, "network_policy": policy})
            (np,) = [m for m in render(spec, identity) if m["kind"] == "NetworkPolicy"]
            _dry_run_strict(k8s_api, np)

    created = {}
    for mode, data in specs.items():
        spec = TFClusterSpec.from_dict(data)
        backend.create(spec, identity)
        created[mode] = spec
    for spec in created.values():
        tasks = spec.task_count()
        _tfk.wait_for(
            f"{tasks} pods of {spec.name}",
            lambda s=spec, t=tasks: len(_tfk.pods(k8s_api, tfk_ns, s.name)) == t,
            timeout=60,
        )

    pods_of = {
        s.name: {p.metadata.name for p in _tfk.pods(k8s_api, tfk_ns, s.name)} for s in created.values()
    }
    everything = set().union(*pods_of.values())
    for spec in created.values():
        np = _policy(k8s_api, tfk_ns, spec.name)
        assert np is not None, spec.name
        assert np["metadata"]["labels"][naming.LABEL_CLUSTER] == spec.name
        # The API server evaluates the selectors: the policy's pods and the pods its
        # ingress rule admits are this cluster's, all of them, and nobody else's.
        selected = _pod_names(k8s_api, tfk_ns, _selector(np["spec"]["pod_selector"]["match_labels"]))
        (rule,) = np["spec"]["ingress"]
        (peer,) = rule["_from"]
        assert peer["namespace_selector"] is None and peer["ip_block"] is None
        admitted = _pod_names(k8s_api, tfk_ns, _selector(peer["pod_selector"]["match_labels"]))
        assert selected == admitted == pods_of[spec.name], spec.name
        assert not selected & (everything - pods_of[spec.name])
        assert [(p["protocol"], p["port"]) for p in rule["ports"]] == [("TCP", spec.port)]
        if spec.name == "iso-ar":
            assert np["spec"]["policy_types"] == ["Ingress", "Egress"]
            assert len(np["spec"]["egress"]) == 4
        else:
            assert np["spec"]["policy_types"] == ["Ingress"] and not np["spec"]["egress"]

    # Deleting one cluster removes its policy and nothing of the others.
    first = created["between_graph"]
    backend.delete(ClusterRef(first.name, first.namespace_name))
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, first.name, timeout=90)
    assert _policy(k8s_api, tfk_ns, first.name) is None
    for spec in list(created.values())[1:]:
        assert _policy(k8s_api, tfk_ns, spec.name) is not None
    for spec in list(created.values())[1:]:
        backend.delete(ClusterRef(spec.name, spec.namespace_name))
    for spec in list(created.values())[1:]:
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, spec.name, timeout=90)
    assert client.NetworkingV1Api(k8s_api).list_namespaced_network_policy(tfk_ns).items == []


def test_switched_off_creates_no_policy(k8s_api, tfk_ns, tfk_conn) -> None:
    backend = KubernetesBackend(conn_id=tfk_conn)
    spec = TFClusterSpec.from_dict(
        _tfk.spec(tfk_ns, "all_reduce", workers=1, ps=0, name="open", network_policy=False)
    )
    ref = backend.create(spec)
    try:
        assert client.NetworkingV1Api(k8s_api).list_namespaced_network_policy(tfk_ns).items == []
        assert _tfk.wait_for(
            "the Job", lambda: _tfk.objects(k8s_api, tfk_ns, "open", kinds=[("batch/v1", "jobs")])
        )
    finally:
        backend.delete(ref)
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, "open", timeout=60)


def test_serving_and_tensorboard_policies_with_the_discovered_api_server(
    k8s_cluster, k8s_api, tfk_ns, tmp_path
) -> None:
    serving = ServingSpec(model_name="digits", claim="models", namespace=tfk_ns)
    discovery_path = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    # The test control plane runs kube-apiserver with --endpoint-reconciler-type=none, so
    # nothing publishes where the API server lives: discovery fails with the field named
    # (before anything is created), not with a policy that silently admits nobody.
    resp, body = _call(
        k8s_api, "GET", f"{discovery_path}?labelSelector=kubernetes.io/service-name=kubernetes"
    )
    if not body.get("items"):
        with pytest.raises(SpecError) as missing:
            api_server_cidrs(SyncApi(k8s_api), serving.network_policy)
        assert missing.value.field == "network_policy.api_server_cidrs" and "not found" in str(missing.value)
    # Publish it as the API server's endpoint reconciler does (a stand-in for the reconciler
    # this control plane switches off; a documentation address, since loopback ones are not
    # accepted in endpoints).
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.10"]}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
    }
    discovery_api = client.DiscoveryV1Api(k8s_api)
    created_slice = not body.get("items")
    if created_slice:
        discovery_api.create_namespaced_endpoint_slice("default", slice_)
    published = sorted(
        {
            a
            for s in discovery_api.list_namespaced_endpoint_slice(
                "default", label_selector="kubernetes.io/service-name=kubernetes"
            ).items
            if s.metadata.name == "kubernetes"
            for ep in s.endpoints or []
            for a in ep.addresses or []
        }
    )

    # The provider's own identity (deploy/rbac) plus apiserver-address.yaml reads it.
    _apply_all(k8s_api, rbac.manifests(tfk_ns), tfk_ns)
    suffix = f"-{uuid.uuid4().hex[:6]}"
    address_rbac = rbac.apiserver_address_manifests(tfk_ns, name_suffix=suffix)
    token = k8s_cluster.service_account_token(tfk_ns, rbac.SERVICE_ACCOUNT)
    sa_api = SyncApi(k8s_cluster.api_client(token=token))
    try:
        # Without the grant: a clear error naming the field, before anything exists.
        with pytest.raises(SpecError) as err:
            api_server_cidrs(sa_api, serving.network_policy)
        assert err.value.field == "network_policy.api_server_cidrs" and "403" in str(err.value)
        _apply_all(k8s_api, address_rbac, "default")
        discovered = _tfk.wait_for(
            "the RoleBinding to take effect", lambda: _try_discover(sa_api, serving), timeout=30
        )
        assert sorted(discovered) == sorted(f"{a}/32" if ":" not in a else f"{a}/128" for a in published)
    finally:
        _tfk.delete_rbac(k8s_api, address_rbac, "default")
        if created_slice:
            discovery_api.delete_namespaced_endpoint_slice("kubernetes", "default")

    board = TensorBoardSpec(
        name="tb-digits",
        claim="logs",
        namespace=tfk_ns,
        network_policy={
            "allow_from": [{"namespace_labels": {"team": "ml"}, "pod_labels": {"app": "notebook"}}]
        },
    )
    manifests = [
        *render_serving(serving, api_server_cidrs=discovered),
        *render_tensorboard(board, api_server_cidrs=discovered),
    ]
    for np in (m for m in manifests if m["kind"] == "NetworkPolicy"):
        _dry_run_strict(k8s_api, np)
        # selects exactly its own Deployment's pods
        (dep,) = [
            m
            for m in manifests
            if m["kind"] == "Deployment" and m["metadata"]["name"] == np["metadata"]["name"]
        ]
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
        for other in (m for m in manifests if m["kind"] == "Deployment" and m is not dep):
            assert (
                not np["spec"]["podSelector"]["matchLabels"].items()
                <= other["spec"]["template"]["metadata"]["labels"].items()
            )


def _apply_all(api, docs: list[dict], namespace: str) -> None:
    for d in docs:
        create_from_dict(api, d, namespace=d["metadata"].get("namespace", namespace))


def _try_discover(api: SyncApi, spec: ServingSpec):
    try:
        return api_server_cidrs(api, spec.network_policy)
    except SpecError:
        return None
