"""Reaching each TF Serving replica at its own pod IP from the test process: there is no
kube-proxy on this node, so a client goes through a loopback forward into the node's
network namespace (``Node.forward``), one per pod."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from airflow_tfk.serving.render import LABEL_SERVING


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
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - a loopback forward
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
