"""Serving helpers of the real-node tests: the two-version linear model of the publish-under-
load tests, and reaching each TF Serving replica at its own pod IP from the test process
(the single node has no kube-proxy, so a client goes through a loopback forward into the
node's network namespace, ``Node.forward``, one per pod)."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from airflow_tfk.serving.render import LABEL_SERVING
from airflow_tfk.serving.spec import ServingSpec

from . import node as nodemod

MODEL = "linear"
SAMPLE = {"instances": [[1.0, 1.0], [2.0, 2.0]]}
# serving_default = scale * sum(inputs): version 1 has scale 1, version 2 scale 2
ANSWERS = {1: [[2.0], [4.0]], 2: [[4.0], [8.0]]}
PATHS = {"default": f"/v1/models/{MODEL}:predict", "stable": f"/v1/models/{MODEL}/labels/stable:predict"}
#: Run with the checkout as working directory and the model store's directory as argument.
MAKE_MODELS = (
    "import sys; from tests.serving.models import save_linear; "
    "save_linear(sys.argv[1], 'linear', 1, 1.0); save_linear(sys.argv[1], 'linear', 2, 2.0)"
)


def two_replicas(namespace: str, network_policy: dict[str, Any]) -> ServingSpec:
    """The publish-under-load tests' serving: :data:`MODEL` from the ``tfk-models`` claim on 2
    replicas of the node's training image, the label polled every 2 s."""
    return ServingSpec(
        model_name=MODEL,
        claim="tfk-models",
        namespace=namespace,
        image=nodemod.TRAIN_IMAGE,
        image_pull_policy="Never",
        replicas=2,
        poll_seconds=2,
        load_timeout_seconds=240,
        network_policy=network_policy,
    )


def version_of(predictions: object) -> int | None:
    """The model version whose answer to :data:`SAMPLE` ``predictions`` is, if any."""
    for version, expected in ANSWERS.items():
        if predictions == expected:
            return version
    return None


def ready_pod_ips(api: Any, namespace: str, service: str) -> dict[str, str]:
    """Pod name -> IP of the Ready serving pods of ``service``."""
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{LABEL_SERVING}={service},app.kubernetes.io/component=serving"
    )
    out = {}
    for p in pods.items:
        ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        if ready and p.status.pod_ip and p.metadata.deletion_timestamp is None:
            out[p.metadata.name] = p.status.pod_ip
    return out


@contextlib.contextmanager
def pod_ports(node: Any, ips: dict[str, str], port: int) -> Iterator[dict[str, int]]:
    """Pod name -> a local port forwarded to that pod's ``port``."""
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(node.forward(ip, port)) for name, ip in ips.items()}


def post(port: int, path: str, body: dict[str, Any], timeout: float = 30.0) -> tuple[int, Any]:
    """(HTTP status, JSON answer) of a POST to 127.0.0.1:``port``."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # a loopback forward
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
