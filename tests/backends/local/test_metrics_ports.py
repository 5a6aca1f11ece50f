"""A spec's ``metrics_port`` on the local backend: every task of every training on this
machine serves its metrics on a port of its own (on Kubernetes each pod has its own
address, so they all share the one number); with fixed ports they are ``metrics_port + k``.

The tasks run the runtime's own metrics server (no TensorFlow), two trainings at once with
the same ``metrics_port``: with one shared port all but one task would fail to bind it,
and a scraper of the second training would read the first one's metrics.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.errors import LocalMachineError
from airflow_tfk.spec.cluster import RoleSpec
from tests.helpers import local_backend, python_cluster

pytestmark = pytest.mark.timeout(120)

# Serves the runtime's metrics on $TFK_METRICS_PORT as a training task would, says so, and
# stays up until the test ends the cluster.
SERVES_METRICS = """
import os, time
from airflow_tfk.runtime import metrics
labels = {"role": os.environ["TFK_ROLE"], "index": os.environ["TFK_INDEX"],
          "cluster": os.environ["TFK_CLUSTER_NAME"]}
served = metrics.serve(metrics.TrainingMetrics(labels, 10, 1), int(os.environ["TFK_METRICS_PORT"]))
print("SERVED" if served else "NOT SERVED", flush=True)
time.sleep(300)
"""


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    yield from local_backend(tmp_path / "root", tmp_path, kill_grace_seconds=0.5)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _served(backend: LocalBackend, ref: ClusterRef, tasks: list[tuple[str, int]]) -> dict[str, str]:
    """Each task's word on its metrics server, once every one has said it."""
    deadline = time.monotonic() + 60
    while True:
        logs = {f"{r}-{i}": backend.logs(ref, r, i) for r, i in tasks}
        said = {name: ("NOT SERVED" if "NOT SERVED" in log else "SERVED") for name, log in logs.items()}
        if all("SERVED" in log for log in logs.values()):
            return said
        assert time.monotonic() < deadline, logs
        time.sleep(0.1)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        return resp.read().decode()


def test_two_trainings_with_one_metrics_port_each_task_serves_its_own(backend) -> None:
    shared = _free_port()
    tasks = [("ps", 0), ("worker", 0), ("worker", 1)]
    refs = [
        backend.create(
            python_cluster(
                name, SERVES_METRICS, workers=2, mode="between_graph", ps=RoleSpec(), metrics_port=shared
            )
        )
        for name in ("metrics-a", "metrics-b")
    ]
    ports: dict[tuple[str, str], int] = {}
    for ref in refs:
        assert _served(backend, ref, tasks) == {f"{r}-{i}": "SERVED" for r, i in tasks}
        for role, index in tasks:
            task = json.loads(
                (backend.cluster_dir(ref) / "tasks" / f"{role}-{index}" / "task.json").read_text()
            )
            ports[(ref.name, f"{role}-{index}")] = int(task["env"]["TFK_METRICS_PORT"])
    assert len(set(ports.values())) == len(ports), ports
    for (cluster, task), port in ports.items():
        role, index = task.rsplit("-", 1)
        text = _scrape(port)
        assert f'cluster="{cluster}",index="{index}",role="{role}"' in text, (cluster, task, text)


def test_fixed_ports_serve_metrics_on_metrics_port_plus_k_and_refuse_a_taken_one(tmp_path: Path) -> None:
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), fixed_ports=True)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        spec = python_cluster(
            "fixed-metrics", SERVES_METRICS, workers=2, port=_free_port(), metrics_port=taken - 1
        )
        with pytest.raises(LocalMachineError) as info:
            backend.create(spec)
    assert info.value.field == "metrics_port" and "worker-1" in str(info.value)
    assert not backend.exists(ClusterRef("fixed-metrics", "default"))
    overlapping = python_cluster("fixed-metrics", SERVES_METRICS, workers=2, port=20000, metrics_port=20001)
    with pytest.raises(LocalMachineError) as info:
        backend.preflight(overlapping)
    assert info.value.field == "metrics_port" and "overlap" in str(info.value)
