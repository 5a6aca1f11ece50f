"""Serving and TensorBoard say why their pods cannot run, read from the pods' status as
the real API server, scheduler and ReplicaSet controller write it (KWOK plays the
kubelet: the harness annotations put a pod in each state).

Each reason is named with the pod; the publish fails at once on it, not at its load
timeout; TensorBoard's start returns only once its pod is Ready, and fails on a pod that
cannot become Ready.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from k8s import harness
from kubernetes import client

from airflow_tfk.serving.base import ServingError
from airflow_tfk.serving.kubernetes import KubernetesServing
from airflow_tfk.serving.publish import publish
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.tensorboard.kubernetes import KubernetesTensorBoard, TensorBoardFailed
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn = _tfk.tfk_conn  # fixtures
tfk_ns = _tfk.tfk_ns
NO_PROXY_SOURCE = {"api_server_cidrs": ["127.0.0.1/32"]}


def _bound_claim(api: Any, namespace: str, claim: str) -> None:
    """A claim bound to a static PV, so its pods schedule (KWOK mounts nothing)."""
    pv = f"tfk-{namespace}-{claim}"
    client.CoreV1Api(api).create_persistent_volume(
        {
            "metadata": {"name": pv, "labels": {"tfk-test": namespace}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "hostPath": {"path": "/tmp/tfk-unused"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }
    )
    _tfk.create_claim(api, namespace, claim, volume=pv)


@pytest.fixture
def claims(k8s_api, tfk_ns):
    for claim in ("models", "logs"):
        _bound_claim(k8s_api, tfk_ns, claim)
    yield
    client.CoreV1Api(k8s_api).delete_collection_persistent_volume(label_selector=f"tfk-test={tfk_ns}")


def _server(namespace: str, **extra: Any) -> KubernetesServing:
    spec = ServingSpec(
        model_name="digits",
        claim="models",
        namespace=namespace,
        network_policy=NO_PROXY_SOURCE,
        load_timeout_seconds=240,
        **extra,
    )
    return KubernetesServing(spec, conn_id=_tfk.CONN_ID)


STATES = {
    "CrashLoopBackOff": {harness.WAITING_REASON: "CrashLoopBackOff"},
    "ErrImagePull": {harness.WAITING_REASON: "ErrImagePull"},
    "ImagePullBackOff": {harness.WAITING_REASON: "ImagePullBackOff"},
    "ErrImageNeverPull": {harness.WAITING_REASON: "ErrImageNeverPull"},
    "OOMKilled": {harness.EXIT_CODE: "137", harness.EXIT_REASON: "OOMKilled"},
    "ExitCode": {harness.EXIT_CODE: "3"},
}


def test_each_reason_names_the_serving_pod(k8s_api, tfk_ns, tfk_conn, claims) -> None:
    """The serving Deployment's own pod template, as bare pods in each state: KWOK does
    not restart containers, and a ReplicaSet replaces a failed pod with a Ready one at once,
    which rightly means the server serves. (The Deployment itself is in the publish test.)"""
    target = _server(tfk_ns)
    target.ensure(lambda _: None)
    apps, core = client.AppsV1Api(k8s_api), client.CoreV1Api(k8s_api)
    apps.patch_namespaced_deployment_scale(target.spec.resource, tfk_ns, {"spec": {"replicas": 0}})
    template = apps.read_namespaced_deployment(target.spec.resource, tfk_ns).spec.template
    body = k8s_api.sanitize_for_serialization(template)
    selector = target.server_selector()
    _tfk.wait_for(
        "the Deployment's pods gone",
        lambda: not core.list_namespaced_pod(tfk_ns, label_selector=selector).items,
        30,
    )
    assert target.server_down() is None  # no pod: it may still start
    took = {}
    for reason, marks in STATES.items():
        name = f"tfs-digits-{reason.lower()}"
        meta = {**body["metadata"], "name": name, "annotations": marks}
        t0 = time.monotonic()
        core.create_namespaced_pod(tfk_ns, {**body, "metadata": meta})
        why = _tfk.wait_for(
            f"{reason} seen", lambda r=reason: (w := target.server_down()) and r in w and w, 30, every=0.1
        )
        took[reason] = time.monotonic() - t0
        assert f"pod {name}: {reason}" in why, why
        if reason == "OOMKilled":
            assert "(exit code 137)" in why, why
        core.delete_namespaced_pod(name, tfk_ns, grace_period_seconds=0)
        _tfk.wait_for(
            "the pod gone",
            lambda: not core.list_namespaced_pod(tfk_ns, label_selector=selector).items,
            30,
        )
    print("seconds from a pod's creation to its reason:", {k: round(v, 2) for k, v in took.items()})


def test_an_unschedulable_serving_pod_fails_the_publish_at_once(k8s_api, tfk_ns, tfk_conn, claims) -> None:
    target = _server(tfk_ns, node_selector=harness.UNSCHEDULABLE_NODE_SELECTOR)
    lines: list[str] = []
    # The store reader Job (the digest of the version's files, before the gate) is the
    # first pod the publish needs, on the same nodes: it fails at once with its reason.
    t0 = time.monotonic()
    with pytest.raises(ServingError) as err:
        publish(target, 1, {"instances": [[1.0]]}, lines.append, poll=0.5, metrics={"accuracy": 1.0})
    took = time.monotonic() - t0
    text = str(err.value)
    assert "the model store reader tfs-digits-read-" in text and ": Unschedulable: 0/" in text, text
    assert took < 30, took
    print(f"unschedulable: store reader failed the publish in {took:.1f}s")
    # KWOK runs no container, so a reader that schedules prints nothing: the digest's own
    # path is proven where a container runs it (tests/k8s_node/test_serving.py).
    target.files_as_read = target.version_files = lambda version: None  # type: ignore[method-assign]
    target.export_info = lambda version: None  # type: ignore[method-assign]  # the reader's too
    t0 = time.monotonic()
    with pytest.raises(ServingError) as err:
        publish(target, 1, {"instances": [[1.0]]}, lines.append, poll=0.5, metrics={"accuracy": 1.0})
    took = time.monotonic() - t0
    text = str(err.value)
    assert "digits version 1 was not published: TF Serving of digits cannot run: pod tfs-digits-" in text, (
        text
    )
    assert ": Unschedulable: 0/" in text and "node(s) didn't match" in text, text
    assert took < 30, took  # against a load timeout of 240 s
    print(f"unschedulable: publish failed in {took:.1f}s")


def test_tensorboard_returns_when_ready_and_fails_on_a_pod_that_cannot_run(
    k8s_api, tfk_ns, tfk_conn, claims
) -> None:
    def board(**extra: Any) -> KubernetesTensorBoard:
        spec = TensorBoardSpec(
            name=f"tb-{uuid.uuid4().hex[:6]}",
            claim="logs",
            namespace=tfk_ns,
            network_policy=NO_PROXY_SOURCE,
            **extra,
        )
        return KubernetesTensorBoard(spec, conn_id=_tfk.CONN_ID, start_timeout_seconds=60, poll_seconds=0.2)

    apps = client.AppsV1Api(k8s_api)
    ok = board()
    ok.start(lambda _: None)
    (pod,) = client.CoreV1Api(k8s_api).list_namespaced_pod(tfk_ns, label_selector=ok.selector()).items
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
    ok.stop(lambda _: None)

    bad = board(node_selector=harness.UNSCHEDULABLE_NODE_SELECTOR)
    t0 = time.monotonic()
    with pytest.raises(TensorBoardFailed) as err:
        bad.start(lambda _: None)
    assert f"TensorBoard {bad.spec.name} cannot run: pod {bad.spec.name}-" in str(err.value), err.value
    assert ": Unschedulable: " in str(err.value)
    assert time.monotonic() - t0 < 20
    # what it made is gone with it
    assert not [d for d in apps.list_namespaced_deployment(tfk_ns).items if d.metadata.name == bad.spec.name]
