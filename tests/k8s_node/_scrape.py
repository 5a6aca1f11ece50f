"""Scraping a training's metrics port from inside the cluster, as Prometheus would.

A scraper is a pod of its own (the node's image, Python only, no TensorFlow) with the
labels a spec's ``network_policy.metrics_from`` admits: it polls each task's
``<pod>.<headless service>:<port>/metrics`` from before the task starts until its server is
gone again, and prints every exposition whose step line changed as one JSON line. A test
reads those lines from the pod's log once the training is over. The NetworkPolicy the
provider created is also judged on paper (:func:`admits`), because a node without a
network-policy plugin lets every pod in.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from kubernetes import client

from airflow_tfk.core import naming

from . import _tfk
from . import node as nodemod

SCRIPT = """\
import http.client, json, sys, time, urllib.request
targets, port, limit = sys.argv[1].split(","), int(sys.argv[2]), float(sys.argv[3])
last, failed, done, t0 = {}, {}, set(), time.monotonic()
while len(done) < len(targets) and time.monotonic() - t0 < limit:
    for t in targets:
        if t in done:
            continue
        try:
            with urllib.request.urlopen(f"http://{t}:{port}/metrics", timeout=5) as r:
                body, ctype = r.read().decode(), r.headers.get("Content-Type")
        except (OSError, http.client.HTTPException) as e:  # e.g. cut off by the task's exit
            if t in last:  # reached before: a busy task, or one that ended
                failed[t] = failed.get(t, 0) + 1
                print(json.dumps({"target": t, "t": time.monotonic() - t0, "error": repr(e)}), flush=True)
                if failed[t] >= 5:
                    done.add(t)  # the task ended: its metrics server went with it
            continue
        failed[t] = 0
        step = [x for x in body.splitlines() if x.startswith("tfk_training_steps_total")]
        if step != last.get(t):
            last[t] = step
            seen = {"target": t, "t": time.monotonic() - t0, "type": ctype, "body": body}
            print(json.dumps(seen), flush=True)
    time.sleep(0.1)
"""


def targets(cluster: str, namespace: str, role: str, replicas: int) -> list[str]:
    """The tasks' DNS names through the role's headless Service."""
    return [f"{cluster}-{role}-{i}.{cluster}-{role}.{namespace}.svc" for i in range(replicas)]


def start(
    api: client.ApiClient, namespace: str, labels: dict[str, str], hosts: list[str], port: int, limit: float
) -> str:
    """A scraper pod with ``labels`` polling ``hosts`` for up to ``limit`` seconds; its name."""
    name = f"scraper-{uuid.uuid4().hex[:6]}"
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="scrape",
                    image=nodemod.TRAIN_IMAGE,
                    image_pull_policy="Never",
                    command=["python", "-c", SCRIPT, ",".join(hosts), str(port), str(limit)],
                    security_context=client.V1SecurityContext(
                        allow_privilege_escalation=False,
                        run_as_non_root=True,
                        run_as_user=1000,
                        capabilities=client.V1Capabilities(drop=["ALL"]),
                        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
                    ),
                )
            ],
        ),
    )
    client.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    return name


def scrapes(api: client.ApiClient, namespace: str, pod: str, timeout: float = 60) -> list[dict[str, Any]]:
    """What the scraper printed (each a scrape, or an ``error`` after one), once it has ended."""
    core = client.CoreV1Api(api)
    _tfk.wait_for(
        f"scraper {pod} to end",
        lambda: core.read_namespaced_pod(pod, namespace).status.phase in ("Succeeded", "Failed"),
        timeout,
    )
    phase = core.read_namespaced_pod(pod, namespace).status.phase
    text = _tfk.pod_log(api, namespace, pod)
    assert phase == "Succeeded", text[-3000:]
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    assert not (selector or {}).get("matchExpressions"), "only matchLabels are judged here"
    return (selector or {}).get("matchLabels", {}).items() <= labels.items()


def admits(
    policy: dict[str, Any],
    target_labels: dict[str, str],
    source_labels: dict[str, str],
    same_namespace: bool,
    port: int,
) -> bool:
    """Whether ``policy`` (a NetworkPolicy as a dict, camelCase) lets a pod with
    ``source_labels`` reach ``port`` of a pod with ``target_labels``: what an enforcing
    network plugin would decide (pod and namespace label selectors, numeric ports)."""
    spec = policy["spec"]
    if not _selects(spec["podSelector"], target_labels) or "Ingress" not in spec.get("policyTypes", []):
        return True
    for rule in spec.get("ingress") or []:
        if rule.get("ports") and not any(p.get("port") == port for p in rule["ports"]):
            continue
        for peer in rule.get("from") or []:
            if "ipBlock" in peer:
                continue
            ns_ok = same_namespace if "namespaceSelector" not in peer else True
            if ns_ok and _selects(peer.get("podSelector"), source_labels):
                return True
    return False


def cluster_policy(api: client.ApiClient, namespace: str, cluster: str) -> dict[str, Any]:
    """The NetworkPolicy the provider made for ``cluster``, as a camelCase dict."""
    items = (
        client.NetworkingV1Api(api)
        .list_namespaced_network_policy(namespace, label_selector=f"{naming.LABEL_CLUSTER}={cluster}")
        .items
    )
    assert len(items) == 1, [p.metadata.name for p in items]
    return api.sanitize_for_serialization(items[0])
