"""What a training used, on the control plane with KWOK's pods: 1 PS + 2 workers whose
containers run known times; the reported core-seconds (and memory, and money from a price
table) equal the sum over the pods of (end - start) x requests, as the API server recorded
the containers' times, within 2%. The PS never ends by itself: it counts until the run's
end deletes it, so its span is bounded by when the test saw it running last and when it
saw it being deleted."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime

import pytest
from k8s import harness
from kubernetes import client

from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

#: how long each worker's container runs, by index (seconds)
RUNS = {0: 4.0, 1: 8.0}
REQUESTS = {"ps": ("500m", "1Gi", 0.5, 1.0), "worker": ("2", "3Gi", 2.0, 3.0)}
PRICES = {"cpu_core_hour": 3.6, "memory_gib_hour": 0.36, "currency": "EUR"}


def _seconds(ts: datetime) -> float:
    return ts.timestamp()


class _Watcher:
    """The last status the test saw of each pod of the cluster, and when each pod was first
    seen being deleted (the PS's end)."""

    def __init__(self, api: client.ApiClient, namespace: str, cluster: str) -> None:
        self.api, self.namespace, self.cluster = api, namespace, cluster
        self.last: dict[str, client.V1Pod] = {}
        self.deleting: dict[str, float] = {}
        self.running_seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            try:
                for p in _tfk.pods(self.api, self.namespace, self.cluster):
                    name = p.metadata.name
                    self.last[name] = p
                    if p.metadata.deletion_timestamp is not None:
                        self.deleting.setdefault(name, now)
                    elif any(c.state.running for c in p.status.container_statuses or []):
                        self.running_seen[name] = now
            except client.ApiException:
                pass
            self._stop.wait(0.1)

    def __enter__(self) -> _Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _rule(pod: client.V1Pod) -> dict[str, str] | None:
    """Workers exit 0 once their container has run its known time; the PS never does."""
    role = pod.metadata.labels.get("tfk.airflow.apache.org/role")
    if role != "worker":
        return None
    started = [c.state.running.started_at for c in pod.status.container_statuses or [] if c.state.running]
    if not started:
        return None
    if time.time() - _seconds(started[0]) < RUNS[_tfk.index_of(pod)]:
        return None
    return {harness.EXIT_CODE: "0"}


def test_usage_is_each_pods_run_times_its_requests_and_the_price(k8s_api, tfk_ns, tfk_conn) -> None:
    ns = tfk_ns
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    name = _tfk.cluster_name(ctx)
    data = _tfk.spec(ns, "between_graph", workers=2, ps=1)
    for role, (cpu, memory, _, _) in REQUESTS.items():
        data[role] = {**data[role], "resources": {"cpu": cpu, "memory": memory}}
    with _Watcher(k8s_api, ns, name) as seen, _tfk.PodDriver(k8s_api, ns, name, rule=_rule) as driver:
        result = _tfk.make_op(ns, data, cleanup="all", prices=PRICES).execute(ctx)
        _tfk.wait_no_leftovers(k8s_api, ns, name)
    assert not driver.errors, driver.errors
    assert result["outcome"] == "succeeded", result
    usage = result["usage"]

    expected: dict[str, list[float]] = {"ps": [0.0, 0.0], "worker": [0.0, 0.0]}  # low, high
    for pod_name, pod in seen.last.items():
        role = pod.metadata.labels["tfk.airflow.apache.org/role"]
        (status,) = pod.status.container_statuses
        if role == "worker":  # ended by itself: the API server's times
            term = status.state.terminated
            assert term is not None, (pod_name, status)
            span = _seconds(term.finished_at) - _seconds(term.started_at)
            assert span >= RUNS[_tfk.index_of(pod)] - 1, (pod_name, span)  # the times are whole seconds
            expected[role][0] += span
            expected[role][1] += span
        else:  # running until the end deleted it
            started = _seconds(status.state.running.started_at)
            expected[role][0] += seen.running_seen[pod_name] - started
            expected[role][1] += seen.deleting.get(pod_name, time.time()) - started
    total_low = total_high = 0.0
    money_low = money_high = 0.0
    for role, (_, _, cores, gib) in REQUESTS.items():
        got = usage["per_role"][role]
        low, high = expected[role]
        assert low * 0.98 - 1 <= got["seconds"] <= high * 1.02 + 1, (role, got, low, high)
        assert got["core_seconds"] == pytest.approx(got["seconds"] * cores, rel=0.02)
        assert got["memory_gib_seconds"] == pytest.approx(got["seconds"] * gib, rel=0.02)
        total_low += low * cores
        total_high += high * cores
        money_low += low * (cores * PRICES["cpu_core_hour"] + gib * PRICES["memory_gib_hour"]) / 3600
        money_high += high * (cores * PRICES["cpu_core_hour"] + gib * PRICES["memory_gib_hour"]) / 3600
    workers = usage["per_role"]["worker"]
    # the workers' part is exact (both from the API server's times): within 2%
    assert workers["seconds"] == pytest.approx(expected["worker"][0], rel=0.02), (workers, expected)
    assert total_low * 0.98 <= usage["total"]["core_seconds"] <= total_high * 1.02, (
        usage,
        total_low,
        total_high,
    )
    assert usage["currency"] == "EUR"
    assert money_low * 0.98 <= usage["cost"] <= money_high * 1.02, (usage, money_low, money_high)
    print(
        f"usage on KWOK: workers {workers['seconds']:.1f}s (pods' times {expected['worker'][0]:.1f}s), "
        f"ps {usage['per_role']['ps']['seconds']:.1f}s "
        f"(seen {expected['ps'][0]:.1f}-{expected['ps'][1]:.1f}s), "
        f"cost {usage['cost']:.6f} EUR (expected {money_low:.6f}-{money_high:.6f})"
    )
