"""Training pods can expose a Prometheus metrics port with scrape annotations."""

from __future__ import annotations

import pytest

from airflow_tfk.errors import SpecError
from airflow_tfk.naming import RunIdentity
from airflow_tfk.render import render
from airflow_tfk.spec import TFClusterSpec

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
