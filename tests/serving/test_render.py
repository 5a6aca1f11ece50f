"""Serving and TensorBoard manifests: valid against the official schemas of Kubernetes
1.29 and 1.37, hardened like the training pods, labelled for selection, injection-proof."""

from __future__ import annotations

import functools
from unittest import mock

import kubernetes_validate
import pytest

from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.protocol.model_config import ModelConfig, ModelServerConfig, parse
from airflow_tfk.serving.files import MAX_ENTRIES, MAX_LISTING_BYTES, MAX_STORE_JSON, PARTS
from airflow_tfk.serving.render import (
    FILE_SCRIPT,
    LABEL_SERVING,
    READER_SCRIPT,
    render_file_reader,
    render_sample_reader,
    render_serving,
)
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.tensorboard.render import render_tensorboard

K8S_VERSIONS = ("1.29", "1.37")
IDENTITY = RunIdentity("train_and_serve", "publish", "manual__2026-01-01T00:00:00+00:00")
_cached_schema = functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)


def validate(manifest, version: str) -> None:
    with mock.patch.object(kubernetes_validate.utils, "schema_contents", _cached_schema):
        kubernetes_validate.validate(manifest, version, strict=True)


SPEC = ServingSpec(
    model_name="digits",
    claim="models",
    sub_path="exports",
    namespace="ml",
    replicas=2,
    resources={"cpu": "500m", "memory": "1Gi"},
    image_pull_secrets=("regcred",),
    node_selector={"pool": "serving"},
    labels={"team": "vision"},
    poll_seconds=5,
)
CONFIG = ModelServerConfig(
    (ModelConfig("digits", SPEC.pod_base_path, versions=(3, 4), labels={"stable": 3}),)
).to_text()


def all_manifests():
    return [
        *render_serving(SPEC, IDENTITY, CONFIG),
        render_sample_reader(SPEC, "tfs-digits-read-abc123", None, IDENTITY),
        render_sample_reader(ServingSpec(model_name="d", claim="m"), "tfs-d-read-1", 7),
        render_file_reader(SPEC, "tfs-digits-file-abc123", "eval/digits.csv", 2**20, IDENTITY),
        *render_tensorboard(
            TensorBoardSpec(
                name="tb-digits", claim="logs", sub_path="r1", namespace="ml", resources={"cpu": "100m"}
            ),
            IDENTITY,
        ),
    ]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_schema_valid(version):
    for manifest in all_manifests():
        validate(manifest, version)


def pods(manifests):
    return [(m, m["spec"]["template"]["spec"]) for m in manifests if m["kind"] in ("Deployment", "Job")]


def test_pods_are_hardened_and_mount_read_only():
    for m, pod in pods(all_manifests()):
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert (
                sc["allowPrivilegeEscalation"] is False
                and sc["capabilities"] == {"drop": ["ALL"]}
                and sc["readOnlyRootFilesystem"] is True
            )
        claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert claims and all(v["persistentVolumeClaim"]["readOnly"] for v in claims)
        assert all(
            vm.get("readOnly")
            for c in pod["containers"]
            for vm in c["volumeMounts"]
            if vm["name"] in ("models", "logs")
        ), m["metadata"]["name"]


def test_serving_objects():
    np, cm, svc, dep, pdb = render_serving(SPEC, IDENTITY, CONFIG)
    assert [m["kind"] for m in (np, cm, svc, dep, pdb)] == [
        "NetworkPolicy",
        "ConfigMap",
        "Service",
        "Deployment",
        "PodDisruptionBudget",  # two replicas
    ]
    assert parse(cm["data"]["models.config"]).get("digits").versions == (3, 4)
    labels = dep["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "tensorflow-serving"
    assert labels["app.kubernetes.io/managed-by"] == "airflow-tfk"
    assert labels[LABEL_SERVING] == "tfs-digits" and labels["team"] == "vision"
    assert labels["tfk.airflow.apache.org/dag-id"] == "train_and_serve"
    assert dep["spec"]["selector"]["matchLabels"] == {LABEL_SERVING: "tfs-digits"}
    assert svc["spec"]["selector"] == {LABEL_SERVING: "tfs-digits"}
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"http": 8501, "grpc": 8500}
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["tensorflow_model_server"]
    assert "--model_config_file=/etc/tfk/models.config" in c["args"]
    assert "--model_config_file_poll_wait_seconds=5" in c["args"]
    assert dep["spec"]["replicas"] == 2
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "serving"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert {v["name"]: v for v in pod["volumes"]}["config"]["configMap"]["name"] == "tfs-digits-config"


def test_serving_is_ready_only_once_the_stable_version_answers():
    dep = render_serving(SPEC, IDENTITY, CONFIG)[3]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    # a replica that starts listens before its model loads: the port alone is not ready
    assert c["readinessProbe"]["httpGet"] == {
        "path": "/v1/models/digits/labels/stable/metadata",
        "port": "http",
    }
    assert "tcpSocket" not in c["readinessProbe"]
    # a server still loading a big model is alive: liveness stays on the port
    assert c["livenessProbe"]["tcpSocket"] == {"port": "http"}
    assert c["livenessProbe"]["initialDelaySeconds"] == 30
    # TF Serving listens only once its config's models loaded: until then only the startup
    # probe runs, with the process start and the spec's load timeout as its budget
    startup = c["startupProbe"]
    assert startup["tcpSocket"] == {"port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= SPEC.load_timeout_seconds + 120


def test_tensorboard_probes_are_not_the_servings():
    dep = render_tensorboard(TensorBoardSpec(name="tb-digits", claim="logs", sub_path="r1", namespace="ml"))[
        2
    ]
    probe = dep["spec"]["template"]["spec"]["containers"][0].get("readinessProbe") or {}
    assert "/v1/models" not in str(probe)


def test_reader_job_passes_paths_as_arguments():
    job = render_sample_reader(SPEC, "tfs-digits-read-x", 4)
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][:2] == ["/bin/sh", "-c"]
    assert c["command"][3:] == [
        "tfk-read-store",
        "/tfk/models/exports/digits",
        "4",
        str(MAX_ENTRIES),
        str(MAX_LISTING_BYTES),
        " ".join(PARTS),
        str(MAX_STORE_JSON),
    ]
    # escaped for Kubernetes' $(VAR) expansion, and nothing else changed
    assert c["command"][2].replace("$$", "$") == READER_SCRIPT
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_file_reader_job_reads_from_the_store_root_by_argument():
    job = render_file_reader(SPEC, "tfs-digits-file-x", "eval/$(id).csv", 1000)
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][3:] == ["tfk-read-store", "/tfk/models/exports", "eval/$$(id).csv", "1000"]
    assert c["command"][2].replace("$$", "$") == FILE_SCRIPT
    assert job["spec"]["backoffLimit"] == 0


def test_hostile_values_stay_values():
    spec = ServingSpec(model_name="digits", claim="models", sub_path='x"; rm -rf /; $(id)')
    job = render_sample_reader(spec, "j", None)
    assert (
        job["spec"]["template"]["spec"]["containers"][0]["command"][4]
        == '/tfk/models/x"; rm -rf /; $$(id)/digits'
    )
    text = 'model_config_list {\n}\n# "}: {{ evil }}\n'
    assert render_serving(spec, None, text)[1]["data"]["models.config"] == text


def test_tensorboard_objects():
    np, svc, dep = render_tensorboard(
        TensorBoardSpec(name="tb-digits", claim="logs", sub_path="r1", namespace="ml")
    )
    assert np["kind"] == "NetworkPolicy"
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--logdir=/tfk/logs/r1" in c["args"]
    # the service proxy strips its prefix: a --path_prefix would make every request a 404
    assert not any(a.startswith("--path_prefix") for a in c["args"])
    # TensorBoard's own main behind the wrapper the API server's proxy needs (launcher.py)
    assert c["command"][:2] == ["python3", "-c"] and "server_class=server" in c["command"][2]
    assert svc["spec"]["ports"][0]["port"] == 6006
    assert dep["metadata"]["labels"]["app.kubernetes.io/component"] == "tensorboard"


def test_monitoring_on_by_default_with_scrape_annotations():
    _np, cm, svc, dep, _pdb = render_serving(SPEC, None, "model_config_list {\n}\n")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert "--monitoring_config_file=/etc/tfk/monitoring.config" in c["args"]
    assert cm["data"]["monitoring.config"] == (
        'prometheus_config {\n  enable: true\n  path: "/monitoring/prometheus/metrics"\n}\n'
    )
    assert dep["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8501",
        "prometheus.io/path": "/monitoring/prometheus/metrics",
    }
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]}["grpc"] == 8500
    assert not any(a.startswith("--enable_batching") for a in c["args"])


def test_monitoring_off_and_batching_on():
    spec = ServingSpec(
        model_name="digits",
        claim="models",
        monitoring=False,
        batching={"max_batch_size": 32, "batch_timeout_micros": 2000, "allowed_batch_sizes": [8, 32]},
    )
    _np, cm, _, dep = render_serving(spec, None, "")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert "annotations" not in dep["spec"]["template"]["metadata"]
    assert "monitoring.config" not in cm["data"]
    assert "--enable_batching=true" in c["args"]
    assert "--batching_parameters_file=/etc/tfk/batching.config" in c["args"]
    assert cm["data"]["batching.config"] == (
        "max_batch_size { value: 32 }\nbatch_timeout_micros { value: 2000 }\n"
        "allowed_batch_sizes: 8\nallowed_batch_sizes: 32\n"
    )


def test_published_metrics_config_map():
    from airflow_tfk.serving.render import render_metrics_config_map

    cm = render_metrics_config_map(SPEC, '{"3": {"accuracy": 0.9}}')
    assert cm["metadata"]["name"] == "tfs-digits-metrics"
    assert cm["data"] == {"published_metrics.json": '{"3": {"accuracy": 0.9}}'}


def test_a_removed_replica_drains_before_it_stops():
    """A replica being removed keeps answering while the nodes' proxies drop it from the
    Service (the two-node serving test deletes one under load: no request refused), within
    the pod's grace period, and needs no shell in the image (the kubelet's own sleep)."""
    from airflow_tfk.serving.render import DRAIN_SECONDS

    dep = next(d for d in render_serving(SPEC) if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["containers"][0]["lifecycle"] == {"preStop": {"sleep": {"seconds": DRAIN_SECONDS}}}
    assert 0 < DRAIN_SECONDS < pod.get("terminationGracePeriodSeconds", 30)
