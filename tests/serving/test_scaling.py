"""The serving spec's scaling and exposure: bad values are refused naming the field, and
the objects they render (PodDisruptionBudget, HorizontalPodAutoscaler, Ingress; the
HTTPRoute is checked against the Gateway API's own CRD on the KWOK tier) are what a
platform expects and valid against the official Kubernetes schemas."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.render import render_serving
from airflow_tfk.serving.spec import ServingSpec
from tests.serving.host_edges import HOSTS
from tests.serving.test_render import K8S_VERSIONS, validate

ALLOW = {"allow_from": [{"namespace_labels": {"kubernetes.io/metadata.name": "ingress"}}]}
ROUTE = {
    "parent_refs": [{"name": "edge", "namespace": "gw", "section_name": "https"}],
    "hostnames": ["ml.example.com"],
}


def spec(**kw) -> ServingSpec:
    return ServingSpec(model_name="digits", claim="models", namespace="ml", **kw)


def by_kind(s: ServingSpec) -> dict:
    return {m["kind"]: m for m in render_serving(s, None, "")}


@pytest.mark.parametrize(
    "kw,field,words",
    [
        ({"replicas": 0}, "replicas", "between 1"),
        (
            {"autoscaling": {"min_replicas": 5, "max_replicas": 2}, "resources": {"cpu": "1"}},
            "autoscaling.min_replicas",
            "must not exceed",
        ),
        (
            {"autoscaling": {"min_replicas": 0, "max_replicas": 2}, "resources": {"cpu": "1"}},
            "autoscaling.min_replicas",
            "between 1",
        ),
        ({"autoscaling": {"min_replicas": 1}}, "autoscaling.max_replicas", "is required"),
        ({"autoscaling": {"max_replicas": 3, "cpu": 50}}, "autoscaling.cpu", "unknown key"),
        (
            {"autoscaling": {"max_replicas": 3, "cpu_utilization": 0}, "resources": {"cpu": "1"}},
            "autoscaling.cpu_utilization",
            "between 1",
        ),
        ({"autoscaling": {"max_replicas": 3}}, "resources.cpu", "CPU request"),
        (
            {"autoscaling": {"max_replicas": 3}, "replicas": 2, "resources": {"cpu": "1"}},
            "replicas",
            "exclusive",
        ),
        ({"replicas": 2, "max_unavailable": 2}, "max_unavailable", "below replicas (2)"),
        ({"replicas": 3, "max_unavailable": 0}, "max_unavailable", "between 1"),
        ({"ingress": {"host": "Not A Host"}, "network_policy": ALLOW}, "ingress.host", "DNS host name"),
        (
            {"ingress": {"tls_secret": "cert"}, "network_policy": ALLOW},
            "ingress.tls_secret",
            "needs ingress.host",
        ),
        ({"ingress": {"class": "nginx"}, "network_policy": ALLOW}, "ingress.class", "unknown key"),
        ({"ingress": {}}, "network_policy.allow_from", "ingress controller"),
        ({"http_route": {"parent_refs": []}, "network_policy": ALLOW}, "http_route.parent_refs", "non-empty"),
        (
            {"http_route": {"parent_refs": [{"namespace": "gw"}]}, "network_policy": ALLOW},
            "http_route.parent_refs[0].name",
            "is required",
        ),
        (
            {"http_route": {"parent_refs": [{"name": "Edge!"}]}, "network_policy": ALLOW},
            "http_route.parent_refs[0].name",
            "not a valid",
        ),
        (
            {"http_route": {**ROUTE, "hostnames": ["ok.example.com", "bad_host"]}, "network_policy": ALLOW},
            "http_route.hostnames[1]",
            "DNS host",
        ),
        ({"http_route": ROUTE}, "network_policy.allow_from", "'http_route' is set"),
    ],
)
def test_bad_values_name_the_field(kw, field, words):
    with pytest.raises(SpecError) as err:
        spec(**kw)
    assert err.value.field == field, err.value
    assert words in str(err.value), err.value


def test_one_replica_has_no_budget_no_spread_no_autoscaler():
    objects = by_kind(spec())
    assert set(objects) == {"NetworkPolicy", "ConfigMap", "Service", "Deployment"}
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert objects["Deployment"]["spec"]["replicas"] == 1 and "topologySpreadConstraints" not in pod


def test_replicas_bring_a_budget_and_a_spread_over_nodes():
    objects = by_kind(spec(replicas=3, max_unavailable=2))
    pdb, dep = objects["PodDisruptionBudget"], objects["Deployment"]
    selector = dep["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 2 and pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    (spread,) = dep["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert (
        spread["topologyKey"] == "kubernetes.io/hostname" and spread["whenUnsatisfiable"] == "ScheduleAnyway"
    )
    assert spread["labelSelector"]["matchLabels"] == selector
    assert dep["spec"]["replicas"] == 3


def test_autoscaler_owns_the_replica_count():
    objects = by_kind(
        spec(
            autoscaling={"min_replicas": 2, "max_replicas": 6, "cpu_utilization": 65},
            resources={"cpu": "500m"},
        )
    )
    hpa, dep = objects["HorizontalPodAutoscaler"], objects["Deployment"]
    assert "replicas" not in dep["spec"]  # a publish re-applies the Deployment: it must not reset the count
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "tfs-digits",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"] == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 65}}
    assert objects["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def test_autoscaled_from_one_still_has_a_budget_that_never_blocks_a_drain():
    objects = by_kind(spec(autoscaling={"max_replicas": 4}, resources={"cpu": "1"}))
    assert objects["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert "PodDisruptionBudget" not in by_kind(spec(autoscaling={"max_replicas": 1}, resources={"cpu": "1"}))


MODEL_PATHS = {
    ("/v1/models/digits", "Exact"),
    ("/v1/models/digits:predict", "Exact"),
    ("/v1/models/digits:classify", "Exact"),
    ("/v1/models/digits:regress", "Exact"),
    ("/v1/models/digits/metadata", "Exact"),
    ("/v1/models/digits/versions", "Prefix"),
    ("/v1/models/digits/labels", "Prefix"),
}


def test_ingress_routes_only_the_models_paths():
    ing = by_kind(
        spec(
            ingress={
                "host": "ml.example.com",
                "class_name": "nginx",
                "tls_secret": "ml-cert",
                "annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "8m"},
            },
            network_policy=ALLOW,
        )
    )["Ingress"]
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["spec"]["tls"] == [{"hosts": ["ml.example.com"], "secretName": "ml-cert"}]
    assert ing["metadata"]["annotations"] == {"nginx.ingress.kubernetes.io/proxy-body-size": "8m"}
    (rule,) = ing["spec"]["rules"]
    assert rule["host"] == "ml.example.com"
    paths = rule["http"]["paths"]
    assert {(p["path"], p["pathType"]) for p in paths} == MODEL_PATHS
    assert all(p["backend"]["service"] == {"name": "tfs-digits", "port": {"name": "http"}} for p in paths)
    # no path reaches the publish's candidate entry or the metrics endpoint
    assert not any("candidate" in p["path"] or "monitoring" in p["path"] for p in paths)
    bare = by_kind(spec(ingress={}, network_policy=ALLOW))["Ingress"]
    assert "host" not in bare["spec"]["rules"][0] and "tls" not in bare["spec"]


def test_http_route_sends_the_default_predict_to_the_stable_label():
    route = by_kind(spec(http_route=ROUTE, network_policy=ALLOW))["HTTPRoute"]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == [
        {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "edge",
            "namespace": "gw",
            "sectionName": "https",
        }
    ]
    assert route["spec"]["hostnames"] == ["ml.example.com"]
    default, rest = route["spec"]["rules"]
    assert default["matches"] == [{"path": {"type": "Exact", "value": "/v1/models/digits:predict"}}]
    assert default["filters"][0]["urlRewrite"]["path"] == {
        "type": "ReplaceFullPath",
        "replaceFullPath": "/v1/models/digits/labels/stable:predict",
    }
    kinds = {"Exact": "Exact", "PathPrefix": "Prefix"}
    got = {(m["path"]["value"], kinds[m["path"]["type"]]) for m in rest["matches"]}
    assert got == MODEL_PATHS - {("/v1/models/digits:predict", "Exact")}
    assert all(r["backendRefs"] == [{"name": "tfs-digits", "port": 8501}] for r in (default, rest))


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_scaled_objects_are_schema_valid(version):
    s = spec(
        autoscaling={"min_replicas": 2, "max_replicas": 5},
        resources={"cpu": "250m"},
        ingress={"host": "ml.example.com", "tls_secret": "c"},
        network_policy=ALLOW,
    )
    objects = render_serving(s, None, "")
    assert {m["kind"] for m in objects} >= {"HorizontalPodAutoscaler", "PodDisruptionBudget", "Ingress"}
    for manifest in objects:
        validate(manifest, version)


def test_from_dict_takes_the_nested_values():
    s = ServingSpec.from_dict(
        {"model_name": "digits", "claim": "m", "replicas": 2, "http_route": ROUTE, "network_policy": ALLOW}
    )
    assert s.http_route.parent_refs[0].section_name == "https"
    assert s.http_route.hostnames == ("ml.example.com",)


@pytest.mark.parametrize("what,host,ingress_ok,route_ok", HOSTS, ids=[h[0] for h in HOSTS])
def test_host_names_are_what_the_api_server_admits(what, host, ingress_ok, route_ok):
    """The same table the KWOK tier sends to the real API server: an Ingress host refuses
    an IPv4 address, an HTTPRoute hostname takes it (its CRD's pattern does); both refuse
    what is not a host name, name the field, and take a label over 63 characters."""
    for kw, field, ok in (
        ({"ingress": {"host": host}}, "ingress.host", ingress_ok),
        (
            {"http_route": {**ROUTE, "hostnames": ["ok.example.com", host]}},
            "http_route.hostnames[1]",
            route_ok,
        ),
    ):
        if ok:
            spec(network_policy=ALLOW, **kw)
            continue
        with pytest.raises(SpecError) as err:
            spec(network_policy=ALLOW, **kw)
        assert err.value.field == field, (what, err.value)


def test_an_empty_ingress_host_is_every_host():
    ingress = by_kind(spec(network_policy=ALLOW, ingress={"host": ""}))["Ingress"]
    assert "host" not in ingress["spec"]["rules"][0]


SNIPPETS = [
    f"{prefix}/{name}"
    for prefix in ("nginx.ingress.kubernetes.io", "nginx.org", "haproxy.org", "example.com")
    for name in (
        "configuration-snippet",
        "server-snippet",
        "auth-snippet",
        "stream-snippet",
        "modsecurity-snippet",
        "location-snippets",
        "backend-config-snippet",
        "Server-Snippet",
    )
]


@pytest.mark.parametrize("key", SNIPPETS)
def test_snippet_annotations_are_refused_naming_them(key: str) -> None:
    """A snippet is raw configuration of the shared ingress controller: never from a
    training file, whatever the controller or the spelling."""
    ingress = {"host": "ml.example.com", "annotations": {key: "return 200 'owned';"}}
    with pytest.raises(SpecError) as err:
        by_kind(spec(ingress=ingress, network_policy=ALLOW))
    assert err.value.field == f"ingress.annotations.{key}" and "snippet" in str(err.value)
