"""The serving spec's scaling and exposure against the real API server (KWOK nodes): every
object it renders - Deployment without a replica count, HorizontalPodAutoscaler
(autoscaling/v2), PodDisruptionBudget (policy/v1), Ingress (networking.k8s.io/v1) and
HTTPRoute (gateway.networking.k8s.io/v1, checked against the Gateway API's own CRD,
sigs.k8s.io/gateway-api v1.6.0 from the Go module proxy: its OpenAPI schema and CEL
rules) - passes a strict server-side dry run, and a misspelt field is refused, so the
check is not vacuous. Then the whole set is applied by ``KubernetesServing.ensure``, each
replica is listed for the publish's per-replica waits, and a spec that drops the scaling
objects removes them on its next ``ensure``."""

from __future__ import annotations

import copy

import pytest
from k8s import addons
from kubernetes import client

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.kubernetes import KubernetesServing
from airflow_tfk.serving.render import render_serving
from airflow_tfk.serving.spec import ServingSpec
from k8s_integration import _tfk
from k8s_integration.test_serving_pods import claims  # noqa: F401 - bound claims, so pods schedule
from tests.serving.host_edges import HOSTS

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures
ALLOW = {
    "api_server_cidrs": ["127.0.0.1/32"],
    "allow_from": [{"namespace_labels": {"kubernetes.io/metadata.name": "gateway"}}],
}
REFUSED: dict[str, str] = {}
ROUTE = {
    "parent_refs": [{"name": "edge", "namespace": "gateway", "section_name": "https"}],
    "hostnames": ["ml.example.com"],
}


def _spec(ns: str, **kw) -> ServingSpec:
    return ServingSpec(model_name="digits", claim="models", namespace=ns, network_policy=ALLOW, **kw)


def _scaled(ns: str) -> ServingSpec:
    return _spec(
        ns,
        autoscaling={"min_replicas": 2, "max_replicas": 4, "cpu_utilization": 70},
        resources={"cpu": "100m", "memory": "64Mi"},
        ingress={"host": "ml.example.com", "class_name": "nginx", "tls_secret": "ml-cert"},
        http_route=ROUTE,
    )


def _path(manifest: dict) -> str:
    api_version, ns, name = (
        manifest["apiVersion"],
        manifest["metadata"]["namespace"],
        manifest["metadata"]["name"],
    )
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = {
        "HTTPRoute": "httproutes",
        "Ingress": "ingresses",
        "HorizontalPodAutoscaler": "horizontalpodautoscalers",
        "PodDisruptionBudget": "poddisruptionbudgets",
        "Deployment": "deployments",
        "Service": "services",
        "ConfigMap": "configmaps",
        "NetworkPolicy": "networkpolicies",
    }[manifest["kind"]]
    return f"{prefix}/namespaces/{ns}/{plural}/{name}"


def _dry_run(api, manifest: dict) -> int:
    """The status of a strict server-side-apply dry run (the error's, when refused; the
    refusal's message is kept in ``REFUSED``)."""
    try:
        resp = api.call_api(
            _path(manifest),
            "PATCH",
            query_params=[("fieldManager", "airflow-tfk"), ("dryRun", "All"), ("fieldValidation", "Strict")],
            header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=manifest,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
    except client.ApiException as exc:
        print(manifest["kind"], exc.status, str(exc.body)[:400])
        REFUSED[manifest["kind"]] = str(exc.body)
        return int(exc.status)
    return int(resp.status)


@pytest.fixture(scope="module")
def gateway_api(k8s_api):
    return addons.install(k8s_api, addons.GATEWAY_API)


def test_every_scaled_object_is_admitted_and_typos_are_refused(k8s_api, gateway_api, tfk_ns) -> None:
    manifests = render_serving(_scaled(tfk_ns), None, "")
    kinds = [m["kind"] for m in manifests]
    assert kinds[-4:] == ["PodDisruptionBudget", "HorizontalPodAutoscaler", "Ingress", "HTTPRoute"], kinds
    assert {m["kind"]: _dry_run(k8s_api, m) for m in manifests} == {k: 201 for k in kinds}
    for kind, where, typo in (
        ("HTTPRoute", ("spec",), "parentRef"),
        ("HTTPRoute", ("spec", "rules", 0), "filter"),
        ("HorizontalPodAutoscaler", ("spec",), "minReplica"),
        ("Ingress", ("spec",), "ingressClass"),
        ("PodDisruptionBudget", ("spec",), "maxUnavailble"),
    ):
        bad = copy.deepcopy(next(m for m in manifests if m["kind"] == kind))
        node = bad
        for key in where:
            node = node[key]
        node[typo] = "x"
        # (a server-side apply of a custom resource with an undeclared field is a 500)
        assert _dry_run(k8s_api, bad) in (400, 422, 500), (kind, typo)
        assert typo in REFUSED[kind], REFUSED[kind]
    # the CRD's own rules run too: an Exact path with a space is not a path
    route = copy.deepcopy(manifests[-1])
    route["spec"]["rules"][1]["matches"][0]["path"]["value"] = "/v1/models/digits :x"
    assert _dry_run(k8s_api, route) == 422
    assert "spec.rules[1].matches[0].path" in REFUSED["HTTPRoute"], REFUSED["HTTPRoute"]


def test_ensure_applies_lists_replicas_and_prunes(k8s_api, gateway_api, tfk_ns, tfk_conn, claims) -> None:  # noqa: F811
    lines: list[str] = []
    target = KubernetesServing(_scaled(tfk_ns), conn_id=tfk_conn)
    target.ensure(lines.append)
    name = "tfs-digits"
    apps, autoscaling = client.AppsV1Api(k8s_api), client.AutoscalingV2Api(k8s_api)
    dep = apps.read_namespaced_deployment(name, tfk_ns)
    hpa = autoscaling.read_namespaced_horizontal_pod_autoscaler(name, tfk_ns)
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (2, 4)
    pdb = client.PolicyV1Api(k8s_api).read_namespaced_pod_disruption_budget(name, tfk_ns)
    assert pdb.spec.max_unavailable == 1
    assert (
        client.NetworkingV1Api(k8s_api).read_namespaced_ingress(name, tfk_ns).spec.rules[0].host
        == "ml.example.com"
    )
    route = client.CustomObjectsApi(k8s_api).get_namespaced_custom_object(
        "gateway.networking.k8s.io", "v1", tfk_ns, "httproutes", name
    )
    assert route["spec"]["parentRefs"][0]["name"] == "edge"
    # The Deployment carries no count of its own: its count is the API server's default
    # or already the autoscaler's (the control plane's HPA controller raises it to
    # min_replicas on its next sync). Scaled to 2 as the autoscaler does, a publish's
    # per-replica view lists each running pod (KWOK runs them).
    assert dep.spec.replicas in (1, 2)
    apps.patch_namespaced_deployment_scale(name, tfk_ns, {"spec": {"replicas": 2}})
    views = _tfk.wait_for("two running serving pods", lambda: _two(target), 60)
    assert all(v._pod == n for n, v in views.items()), views
    target.ensure(lines.append)  # a publish re-applies: the autoscaler's count stays
    assert apps.read_namespaced_deployment(name, tfk_ns).spec.replicas == 2
    # A spec without scaling and ways in: its ensure removes what the older one made.
    KubernetesServing(_spec(tfk_ns), conn_id=tfk_conn).ensure(lines.append)
    for kind in ("HTTPRoute", "Ingress", "HorizontalPodAutoscaler", "PodDisruptionBudget"):
        assert any(line.startswith(f"deleted {kind} {name}") for line in lines), (kind, lines)
    with pytest.raises(client.ApiException) as gone:
        autoscaling.read_namespaced_horizontal_pod_autoscaler(name, tfk_ns)
    assert gone.value.status == 404
    KubernetesServing(_scaled(tfk_ns), conn_id=tfk_conn).delete(lines.append)
    assert not apps.list_namespaced_deployment(tfk_ns).items


def _two(target: KubernetesServing):
    views = target.replicas()
    return views if len(views) == 2 and all(v._pod for v in views.values()) else None


def _edge(k8s_api, tfk_ns: str, **kw) -> dict[str, int]:
    """The dry-run status of each exposure object of a spec built from ``kw``."""
    manifests = render_serving(_spec(tfk_ns, **kw), None, "")
    return {m["kind"]: _dry_run(k8s_api, m) for m in manifests if m["kind"] in ("Ingress", "HTTPRoute")}


def _entries(ns: str, route: dict) -> tuple[dict, dict]:
    """The Ingress and the HTTPRoute a spec with both renders, for ``ml.example.com``."""
    manifests = render_serving(
        _spec(ns, ingress={"host": "ml.example.com"}, http_route={**route, "hostnames": ["ml.example.com"]}),
        None,
        "",
    )
    return (
        next(m for m in manifests if m["kind"] == "Ingress"),
        next(m for m in manifests if m["kind"] == "HTTPRoute"),
    )


def test_the_specs_edges_are_the_api_servers(k8s_api, gateway_api, tfk_ns) -> None:
    """What the spec accepts at its edges, the API server admits; what it refuses there
    (an IP as a host, annotations over the object's bound, a character the apply cannot
    carry), the API server refuses too - so the spec's refusals are not its own invention."""
    route = {"parent_refs": [{"name": "edge", "namespace": "gateway"}]}
    accepted = {
        "long label": {"ingress": {"host": "a" * 63 + ".example.com"}},
        "wildcard": {
            "ingress": {"host": "*.example.com"},
            "http_route": {**route, "hostnames": ["*.example.com"]},
        },
        "annotations near the bound": {"ingress": {"annotations": {f"k{i}": "x" * 4000 for i in range(60)}}},
        "a hostname twice": {"http_route": {**route, "hostnames": ["a.example.com", "a.example.com"]}},
        "a Gateway twice, by two listeners": {
            "http_route": {
                "parent_refs": [{**route["parent_refs"][0], "section_name": s} for s in ("a", "b")]
            }
        },
    }
    for what, kw in accepted.items():
        assert set(_edge(k8s_api, tfk_ns, **kw).values()) == {201}, (what, REFUSED)
    ingress, http_route = _entries(tfk_ns, route)
    for what, kind, change, spec_kw in (
        (
            "IP host",
            "Ingress",
            lambda m: m["spec"]["rules"][0].update(host="10.0.0.1"),
            {"ingress": {"host": "10.0.0.1"}},
        ),
        (
            "annotations over 256 KiB",
            "Ingress",
            lambda m: (
                m["metadata"].setdefault("annotations", {}).update({f"k{i}": "x" * 4000 for i in range(70)})
            ),
            {"ingress": {"annotations": {f"k{i}": "x" * 4000 for i in range(70)}}},
        ),
        (
            "a Gateway twice",
            "HTTPRoute",
            lambda m: m["spec"]["parentRefs"].append(dict(m["spec"]["parentRefs"][0])),
            {"http_route": {"parent_refs": [route["parent_refs"][0]] * 2}},
        ),
        (
            "emoji annotation",
            "Ingress",
            lambda m: m["metadata"].setdefault("annotations", {}).update({"a": "\U0001f680"}),
            {"ingress": {"annotations": {"a": "\U0001f680"}}},
        ),
    ):
        bad = copy.deepcopy(ingress if kind == "Ingress" else http_route)
        change(bad)
        assert _dry_run(k8s_api, bad) in (400, 422), (what, REFUSED.get(kind))
        with pytest.raises(SpecError):
            _spec(tfk_ns, **spec_kw)


def _host_admitted(api, manifest: dict, host: str) -> bool:
    bad = copy.deepcopy(manifest)
    if bad["kind"] == "Ingress":
        bad["spec"]["rules"][0]["host"] = host
        bad["spec"].pop("tls", None)
    else:
        bad["spec"]["hostnames"] = [host]
    status = _dry_run(api, bad)
    assert status in (201, 400, 422), (host, status, REFUSED.get(bad["kind"]))
    return status == 201


def _spec_admits(ns: str, **kw) -> bool:
    try:
        _spec(ns, **kw)
    except SpecError:
        return False
    return True


def test_host_names_the_spec_takes_are_the_api_servers(k8s_api, gateway_api, tfk_ns) -> None:
    """Every host of the shared edge table (IPv4 and IPv6, wildcards, trailing dot,
    uppercase, 253+ characters, a 64-character label...) goes to the real API server as
    an Ingress host and as an HTTPRoute hostname: the spec takes exactly what it admits."""
    route = {"parent_refs": [{"name": "edge", "namespace": "gateway"}]}
    ingress, http_route = _entries(tfk_ns, route)
    disagree = []
    for what, host, ingress_ok, route_ok in HOSTS:
        server = (_host_admitted(k8s_api, ingress, host), _host_admitted(k8s_api, http_route, host))
        spec = (
            _spec_admits(tfk_ns, ingress={"host": host}),
            _spec_admits(tfk_ns, http_route={**route, "hostnames": [host]}),
        )
        if not server == spec == (ingress_ok, route_ok):
            disagree.append(
                (what, host[:40], "server", server, "spec", spec, "table", (ingress_ok, route_ok))
            )
    assert not disagree, disagree
