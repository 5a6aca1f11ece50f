"""Training pods can expose a Prometheus metrics port with scrape annotations."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec

BASE = {
    "name": "mnist",
    "image": "tensorflow/tensorflow:2.21.0",
    "command": ["python", "train.py"],
    "worker": {"replicas": 2},
    "ps": {"replicas": 1},
}


def pod_templates(manifests: list[dict]) -> list[dict]:
    return [m["spec"]["template"] for m in manifests if m["kind"] == "Job"]


def test_metrics_port_and_scrape_annotations_on_every_pod() -> None:
    spec = TFClusterSpec.from_dict({**BASE, "metrics_port": 9090, "metrics_path": "/prom"})
    identity = RunIdentity("dag", "train", "manual__1", -1)
    templates = pod_templates(render(spec, identity))
    assert len(templates) == 2  # the ps and worker Jobs
    for t in templates:
        ann = t["metadata"]["annotations"]
        assert ann["prometheus.io/scrape"] == "true"
        assert ann["prometheus.io/port"] == "9090" and ann["prometheus.io/path"] == "/prom"
        assert set(identity.annotations()) <= set(ann)  # the identity stays
        ports = {p["name"]: p["containerPort"] for p in t["spec"]["containers"][0]["ports"]}
        assert ports["metrics"] == 9090 and len(ports) == 2


def test_no_metrics_port_by_default() -> None:
    for t in pod_templates(render(TFClusterSpec.from_dict(BASE))):
        assert "prometheus.io/scrape" not in (t["metadata"].get("annotations") or {})
        assert [p["name"] for p in t["spec"]["containers"][0]["ports"]] != [] and all(
            p["name"] != "metrics" for p in t["spec"]["containers"][0]["ports"]
        )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"metrics_port": 2222}, "metrics_port"),
        ({"metrics_port": 0}, "metrics_port"),
        ({"metrics_path": "x"}, "metrics_path"),
    ],
)
def test_bad_metrics_options_name_the_field(changes, field) -> None:
    with pytest.raises(SpecError) as err:
        TFClusterSpec.from_dict({**BASE, **changes})
    assert err.value.field == field


PROMETHEUS = {
    "namespace_labels": {"kubernetes.io/metadata.name": "monitoring"},
    "pod_labels": {"app.kubernetes.io/name": "prometheus"},
}


def test_the_task_is_told_its_metrics_port_and_path() -> None:
    """The runtime serves its metrics where the container declares them (TFK_METRICS_*)."""
    spec = TFClusterSpec.from_dict({**BASE, "metrics_port": 9090, "metrics_path": "/prom"})
    for t in pod_templates(render(spec)):
        env = {e["name"]: e.get("value") for e in t["spec"]["containers"][0]["env"]}
        assert env["TFK_METRICS_PORT"] == "9090" and env["TFK_METRICS_PATH"] == "/prom"
    for t in pod_templates(render(TFClusterSpec.from_dict(BASE))):
        assert not any(e["name"].startswith("TFK_METRICS") for e in t["spec"]["containers"][0]["env"])


def test_the_network_policy_lets_only_the_named_scrapers_in_on_the_metrics_port() -> None:
    spec = TFClusterSpec.from_dict(
        {**BASE, "metrics_port": 9090, "network_policy": {"metrics_from": [PROMETHEUS]}}
    )
    (policy,) = [m for m in render(spec) if m["kind"] == "NetworkPolicy"]
    ingress = policy["spec"]["ingress"]
    assert [r["ports"] for r in ingress] == [
        [{"protocol": "TCP", "port": 2222}],
        [{"protocol": "TCP", "port": 9090}],
    ]
    assert ingress[1]["from"] == [
        {
            "namespaceSelector": {"matchLabels": PROMETHEUS["namespace_labels"]},
            "podSelector": {"matchLabels": PROMETHEUS["pod_labels"]},
        }
    ]
    # without metrics_from the metrics port admits nobody
    (closed,) = [
        m
        for m in render(TFClusterSpec.from_dict({**BASE, "metrics_port": 9090}))
        if m["kind"] == "NetworkPolicy"
    ]
    assert len(closed["spec"]["ingress"]) == 1


def test_metrics_from_needs_a_metrics_port_and_real_peers() -> None:
    with pytest.raises(SpecError) as err:
        TFClusterSpec.from_dict({**BASE, "network_policy": {"metrics_from": [PROMETHEUS]}})
    assert err.value.field == "network_policy.metrics_from"
    with pytest.raises(SpecError) as err:
        TFClusterSpec.from_dict({**BASE, "metrics_port": 9090, "network_policy": {"metrics_from": ["x"]}})
    assert err.value.field.startswith("network_policy.metrics_from[0]")


def test_the_metrics_settings_render_what_kubernetes_schemas_accept() -> None:
    from airflow_tfk.render.schema_check import MIN_KUBERNETES_VERSION, validate_manifests

    spec = TFClusterSpec.from_dict(
        {**BASE, "metrics_port": 9090, "network_policy": {"metrics_from": [PROMETHEUS]}}
    )
    assert validate_manifests(render(spec), MIN_KUBERNETES_VERSION) == []
