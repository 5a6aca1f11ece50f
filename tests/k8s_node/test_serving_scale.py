"""A publish under load on two real TF Serving replicas (the project's stand-in model
server in real pods): client loops call both pods at their own IPs, on the model's
default ``:predict`` and on its ``stable`` label, while version 2 replaces version 1.

What it shows:
- no client gets an answer from version 2 before the publish promotes it (the candidate is
  loaded and smoke-tested under its own name only);
- no client of the ``stable`` label gets version 2 before every replica has it AVAILABLE;
- every request is answered (no error) and both replicas end on version 2.

About 1-3 min (two publishes, two pods importing TensorFlow): run on request,
``TFK_NODE_SERVING_SCALE=1``."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from airflow_tfk.serving.kubernetes import KubernetesServing
from airflow_tfk.serving.publish import publish

from . import _serving, _tfk
from . import node as nodemod

pytestmark = [
    pytest.mark.k8s_node,
    pytest.mark.skipif(
        os.environ.get("TFK_NODE_SERVING_SCALE") != "1",
        reason="a publish under load on two replicas, 1-3 min: set TFK_NODE_SERVING_SCALE=1",
    ),
]
MODEL, SAMPLE, PATHS = _serving.MODEL, _serving.SAMPLE, _serving.PATHS
PROXY_SOURCE = {"api_server_cidrs": [f"{ipaddress.ip_network(nodemod.POD_SUBNET)[1]}/32"]}


def _version_of(answer: object) -> int | None:
    return _serving.version_of(answer.get("predictions")) if isinstance(answer, dict) else None


def test_publish_under_load_promotes_on_every_replica_first(
    k8s_node, node_api, node_ns, node_conn, local_volumes
) -> None:
    store = local_volumes.provide(node_ns, "tfk-models")
    _tfk.create_claim(node_api, node_ns, "tfk-models", storage_class="tfk-local")
    subprocess.run(
        [sys.executable, "-c", _serving.MAKE_MODELS, str(store)], cwd=nodemod.REPO, check=True, timeout=600
    )
    spec = _serving.two_replicas(node_ns, PROXY_SOURCE)
    target = KubernetesServing(spec, conn_id=node_conn)
    t0 = time.monotonic()
    publish(target, 1, emit=print)
    first = time.monotonic() - t0
    ips = _serving.ready_pod_ips(node_api, node_ns, spec.resource)
    assert len(ips) == 2, ips

    seen: list[tuple[float, str, str, int | None, int]] = []  # (answered at, pod, path, version, status)
    stop = threading.Event()

    def client(port: int, pod: str, path: str) -> None:
        while not stop.is_set():
            try:
                status, answer = _serving.post(port, PATHS[path], SAMPLE)
            except OSError as exc:  # a refused or reset connection is a lost request
                status, answer = -1, str(exc)
            seen.append((time.monotonic(), pod, path, _version_of(answer), status))
            time.sleep(0.05)

    marks: list[tuple[float, str]] = []

    def emit(line: str) -> None:
        marks.append((time.monotonic(), line))
        print(line)

    with _serving.pod_ports(k8s_node, ips, spec.rest_port) as ports:
        loops = [
            threading.Thread(target=client, args=(port, pod, path), daemon=True)
            for pod, port in ports.items()
            for path in PATHS
        ]
        for t in loops:
            t.start()
        time.sleep(2)  # answers before the publish starts
        t1 = time.monotonic()
        result = publish(target, 2, emit=emit)
        second = time.monotonic() - t1
        time.sleep(spec.poll_seconds * 3)  # the label reaches every replica's config poll
        stop.set()
        for t in loops:
            t.join(timeout=60)

    assert (result.version, result.previous_version) == (2, 1), result
    promoting = next(t for t, line in marks if line.startswith(f"promoting {MODEL} version 2"))
    everywhere = next(t for t, line in marks if "AVAILABLE on every replica (2)" in line)
    early = [s for s in seen if s[3] == 2 and s[0] < promoting]
    early_stable = [s for s in seen if s[3] == 2 and s[2] == "stable" and s[0] < everywhere]
    errors = [s for s in seen if s[4] != 200 or s[3] is None]
    counts = Counter((s[2], s[3]) for s in seen)
    print(
        f"publish of version 1 on 2 replicas {first:.1f} s, of version 2 under load {second:.1f} s; "
        f"{len(seen)} requests, by (path, version): {dict(counts)}; version 2 answers before promotion: "
        f"{len(early)}; stable-label answers of version 2 before every replica had it: {len(early_stable)}; "
        f"errors: {len(errors)}"
    )
    assert early == [], early[:5]
    assert early_stable == [], early_stable[:5]
    assert errors == [], errors[:5]
    for pod in ips:  # the load reached both replicas, and both end on version 2
        for path in PATHS:
            mine = [s for s in seen if s[1] == pod and s[2] == path]
            assert mine and mine[0][3] == 1 and mine[-1][3] == 2, (pod, path, mine[:1], mine[-1:])
