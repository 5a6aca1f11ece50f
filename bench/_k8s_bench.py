"""Shared pieces of the benchmarks against the real API server (bench/bench_k8s_*.py).

- ``control_plane()``: the integration suite's control plane (tests/k8s/harness.py: real
  kube-apiserver/controller-manager/scheduler v1.36 + etcd, KWOK nodes), started once per
  benchmark, with the controller-manager's client QPS raised so the Job controller can
  make hundreds of pods in seconds (the defaults, 20 QPS, are a 2-core laptop's worst case).
- ``RequestCounter``: counts every HTTP request a given ``kubernetes`` ApiClient sends
  (urllib3 level: the RESTClientObject each ApiClient owns), with timestamps.
- ``connection()``: the ``kubernetes`` Airflow connection the provider uses, from the
  generated kubeconfig.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
if "AIRFLOW_HOME" not in os.environ:
    import atexit
    import shutil

    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="tfk-bench-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from k8s import harness  # noqa: E402

IMAGE = "registry.invalid/tfk/train:1"
CONN_ID = "tfk_bench"


def cluster_spec(namespace: str, workers: int, ps: int, **fields: Any) -> dict[str, Any]:
    """The benchmarks' cluster: between_graph, ``workers`` + ``ps`` tasks of a script that
    KWOK never runs; ``fields`` add to it or replace."""
    return {
        "image": IMAGE,
        "namespace": namespace,
        "mode": "between_graph",
        "command": ["python", "/opt/train.py"],
        "worker": {"replicas": workers},
        "ps": {"replicas": ps},
        **fields,
    }


def training_operator(namespace: str, workers: int, ps: int, **fields: Any) -> Any:
    """The provider's blocking operator on :func:`cluster_spec`, through the benchmarks'
    connection; no progress lines (one an hour) to keep the measured loop quiet."""
    from airflow_tfk.operators.training import TFTrainingOperator

    return TFTrainingOperator(
        task_id="train",
        backend="kubernetes",
        kubernetes_conn_id=CONN_ID,
        progress_interval=3600,
        cluster_spec=cluster_spec(namespace, workers, ps, **fields),
    )


@contextlib.contextmanager
def control_plane(nodes: int = 4) -> Iterator[harness.ControlPlane]:
    workdir = tempfile.mkdtemp(prefix="tfk-bench-k8s-")
    cp = harness.ControlPlane.start(
        workdir,
        nodes=nodes,
        log=lambda m: print(m, file=sys.stderr),
        extra_args={
            "kube-controller-manager": [
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--concurrent-job-syncs=10",
            ],
            "kube-scheduler": ["--kube-api-qps=200", "--kube-api-burst=400"],
        },
    )
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(cp.kubeconfig)}}
    )
    try:
        yield cp
    finally:
        cp.stop()
        cp.remove()


def namespace(api: Any, name: str) -> str:
    from kubernetes import client

    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    deadline = time.monotonic() + 30  # the service-account controller admits pods after this
    while time.monotonic() < deadline:
        try:
            client.CoreV1Api(api).read_namespaced_service_account("default", name)
            return name
        except client.ApiException:
            time.sleep(0.1)
    return name


@dataclass
class RequestCounter:
    """Counts the requests of the ApiClients it watches (method, path, time)."""

    clients: set[int] = field(default_factory=set)
    log: list[tuple[float, str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def watch(self, api_client: Any) -> Any:
        self.clients.add(id(api_client.rest_client))
        return api_client

    def reset(self) -> None:
        with self._lock:
            self.log.clear()

    def count(self, since: float = 0.0, until: float = float("inf")) -> int:
        return sum(1 for t, _, _ in self.log if since <= t < until)

    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict[str, int]:
        out: dict[str, int] = {}
        for t, method, url in self.log:
            if since <= t < until:
                path = url.split("?", 1)[0].split("://", 1)[-1].split("/", 1)[-1]
                parts = path.split("/")
                if "namespaces" in parts[:-2]:
                    kind = "/".join(
                        parts[parts.index("namespaces") + 2 :][::2][:1]
                        + parts[parts.index("namespaces") + 2 :][2:3]
                    )
                else:
                    kind = "namespaces" if parts[-2:-1] == ["namespaces"] else parts[-1]
                if "watch=true" in url:
                    kind += "(watch)"
                key = f"{method} {kind}"
                out[key] = out.get(key, 0) + 1
        return out


_COUNTERS: list[RequestCounter] = []


def install(counter: RequestCounter) -> RequestCounter:
    """Patch the kubernetes client's urllib3 layer once; every counter sees its clients."""
    from kubernetes.client import rest

    if not _COUNTERS:
        original = rest.RESTClientObject.request

        def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            now = time.monotonic()
            for c in _COUNTERS:
                if id(self) in c.clients:
                    with c._lock:
                        c.log.append((now, method, url))
            return original(self, method, url, *args, **kwargs)

        rest.RESTClientObject.request = counted  # type: ignore[method-assign]
    _COUNTERS.append(counter)
    return counter


def wait_pods_running(
    api: Any, ns: str, count: int, timeout: float = 300, selector: str | None = None
) -> float:
    """Seconds until ``count`` pods of the namespace run (KWOK)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        pods = core.list_namespaced_pod(ns, label_selector=selector or "").items
        if sum(1 for p in pods if p.status.phase == "Running") >= count:
            return time.monotonic() - t0
        time.sleep(1)
    raise TimeoutError(f"fewer than {count} running pods in {ns} after {timeout}s")


def seeds_layout(cluster: str, workers: int, ps: int, port: int = 2222) -> list[dict[str, Any]]:
    """The seeds' one-Service-per-task layout: a Service and a Job per worker, a Service and
    a Deployment per PS (what their Jinja2 template produced), as plain manifests."""

    def pod(role: str, i: int) -> dict[str, Any]:
        hosts = {
            r: ",".join(f"{cluster}-{r}-{j}:{port}" for j in range(n))
            for r, n in (("ps", ps), ("worker", workers))
        }
        return {
            "metadata": {"labels": {"cluster": cluster, "job": role, "task": str(i)}},
            "spec": {
                "restartPolicy": "Never" if role == "worker" else "Always",
                "containers": [
                    {
                        "name": "tensorflow",
                        "image": IMAGE,
                        "command": ["python", "/opt/train.py"],
                        "args": [
                            f"--ps_hosts={hosts['ps']}",
                            f"--worker_hosts={hosts['worker']}",
                            f"--job_name={role}",
                            f"--task_index={i}",
                        ],
                        "ports": [{"containerPort": port}],
                    }
                ],
            },
        }

    out: list[dict[str, Any]] = []
    for role, n in (("ps", ps), ("worker", workers)):
        for i in range(n):
            name = f"{cluster}-{role}-{i}"
            labels = {"cluster": cluster, "job": role, "task": str(i)}
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {"selector": labels, "ports": [{"port": port}]},
                }
            )
            if role == "ps":
                out.append(
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": name, "labels": labels},
                        "spec": {
                            "replicas": 1,
                            "selector": {"matchLabels": labels},
                            "template": pod(role, i),
                        },
                    }
                )
            else:
                out.append(
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "metadata": {"name": name, "labels": labels},
                        "spec": {"backoffLimit": 0, "template": pod(role, i)},
                    }
                )
    return out


def wait_no_pods(api: Any, ns: str, timeout: float = 300) -> float:
    from kubernetes import client

    core = client.CoreV1Api(api)
    t0 = time.monotonic()
    while core.list_namespaced_pod(ns, limit=1).items:
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"pods still in {ns} after {timeout}s")
        time.sleep(0.5)
    return time.monotonic() - t0


def install_async(counter: RequestCounter, thread: str | None = None) -> RequestCounter:
    """Count every request of every ``kubernetes_asyncio`` client (each wait makes its
    own), in this process, or only those sent from the thread named ``thread`` (each wait
    on an event loop of its own thread)."""
    import threading

    from kubernetes_asyncio.client import rest

    original = rest.RESTClientObject.request

    async def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if thread is None or threading.current_thread().name == thread:
            with counter._lock:
                counter.log.append((time.monotonic(), method, url))
        return await original(self, method, url, *args, **kwargs)

    rest.RESTClientObject.request = counted  # type: ignore[method-assign]
    return counter
