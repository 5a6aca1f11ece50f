"""Native gang scheduling (``gang_scheduling: native``) against Kubernetes 1.37's own
scheduler, with the GenericWorkload gate the harness turns on:

- the API server admits the PodGroup and keeps every pod's ``schedulingGroup`` (strict
  field validation: nothing unknown, nothing dropped);
- on a pool of KWOK nodes one CPU short of the cluster, no pod of a gang is ever bound,
  and the training fails with the scheduler's Unschedulable reason after the provider's
  timeout; the same cluster without the gang is half scheduled, as before;
- a cluster that fits exactly has every pod bound and trains to success;
- the PodGroup goes with the cluster: nothing with its label is left.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from airflow_tfk.core import naming
from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

POOL_LABEL = "kwok.tfk.test/pool"
NODE_CPUS = 4
NODES = 2
ROOM = NODE_CPUS * NODES  # one CPU per task: this many tasks fit, one more does not


@pytest.fixture(scope="module")
def pool(k8s_cluster, k8s_api) -> Iterator[str]:
    """Two KWOK nodes of 4 CPUs that only this module's pods may use (a taint keeps the
    other tests' pods off them, and their requests off everyone's capacity figures)."""
    name = f"gang-{uuid.uuid4().hex[:6]}"
    nodes = {f"kwok-{name}-{i}": {} for i in range(NODES)}
    capacity = {"cpu": str(NODE_CPUS), "memory": "16Gi", "pods": "110"}
    with _tfk.node_pool(k8s_cluster, k8s_api, POOL_LABEL, name, nodes, capacity) as pool:
        yield pool


def gang_spec(namespace: str, pool: str, workers: int, gang: str) -> dict[str, Any]:
    """A between_graph cluster (1 PS + ``workers``) of one CPU per task, on the pool."""
    role = {
        "resources": {"cpu": "1"},
        "node_selector": {POOL_LABEL: pool},
        "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}],
    }
    spec = _tfk.spec(namespace, "between_graph", workers=workers, ps=1, gang_scheduling=gang)
    spec["worker"].update(role)
    spec["ps"].update(role)
    return spec


class BindWatch:
    """Polls the cluster's pods while a training runs: every pod seen, and every pod the
    scheduler bound (``spec.nodeName``) with when it was first seen bound, and the most pods
    seen bound at one time (once the failed cluster is torn down, its freed CPUs may bind the
    task that waited, so "how many ever bound" is not "how many fit")."""

    def __init__(self, api: client.ApiClient, namespace: str, cluster: str) -> None:
        self.api, self.namespace, self.cluster = api, namespace, cluster
        self.seen: set[str] = set()
        self.bound: dict[str, float] = {}
        self.most_bound_at_once = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now_bound = 0
            for pod in _tfk.pods(self.api, self.namespace, self.cluster):
                self.seen.add(pod.metadata.name)
                if pod.spec.node_name:
                    self.bound.setdefault(pod.metadata.name, time.monotonic())
                    now_bound += 1
            self.most_bound_at_once = max(self.most_bound_at_once, now_bound)
            self._stop.wait(0.1)

    def __enter__(self) -> BindWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_the_api_server_admits_the_pod_group_and_keeps_every_pods_group(k8s_api, tfk_ns, tfk_conn) -> None:
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend

    spec = TFClusterSpec.from_dict(
        _tfk.spec(
            tfk_ns,
            "parameter_server",
            workers=3,
            ps=2,
            name="gang-admitted",
            gang_scheduling="native",
            evaluator={"replicas": 1},
        )
    )
    manifests = [m for m in render(spec) if m["kind"] in ("PodGroup", "Job")]
    assert [m["kind"] for m in manifests].count("PodGroup") == 1
    for m in manifests:
        status, warning = _tfk.apply_dry_run(k8s_api, m, tfk_ns)
        assert status in (200, 201) and warning is None, (m["kind"], m["metadata"]["name"], warning)
    # The backend's own create (its check that the PodGroup API is served passes here)
    # and delete: what the server stored, and that the group goes with the cluster.
    backend = KubernetesBackend(conn_id=tfk_conn)
    ref = backend.create(spec)
    stored = _tfk.objects(k8s_api, tfk_ns, spec.name)
    group = stored[f"podgroups/{naming.pod_group_name(spec.name)}"]
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 7}}  # every task, the evaluator's too
    for role in spec.roles():
        template = stored[f"jobs/{naming.role_resource_name(spec.name, role)}"]["spec"]["template"]["spec"]
        assert template["schedulingGroup"] == {"podGroupName": naming.pod_group_name(spec.name)}, role
    selector = f"{naming.LABEL_CLUSTER}={spec.name}"
    pods = _tfk.wait_for(
        "the gang's 7 pods", lambda: len(p := _tfk._list(k8s_api, "v1", "pods", tfk_ns, selector)) == 7 and p
    )
    assert all(p["spec"]["schedulingGroup"] == {"podGroupName": group["metadata"]["name"]} for p in pods)
    backend.delete(ref, "test over")
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, spec.name)


def _train(tfk_ns: str, name_hint: str, spec: dict[str, Any], **kw: Any) -> tuple[dict[str, Any], str, Any]:
    ctx = _tfk.task_context(f"manual__{name_hint}")
    op = _tfk.make_op(tfk_ns, spec, backend_config={"unschedulable_timeout": 3}, **kw)
    return ctx, _tfk.cluster_name(ctx), op


def test_a_gang_that_does_not_fit_binds_no_pod_and_fails_unschedulable(
    k8s_api, tfk_ns, tfk_conn, pool
) -> None:
    ctx, name, op = _train(tfk_ns, "gang-short", gang_spec(tfk_ns, pool, ROOM, "native"))
    t0 = time.monotonic()
    with BindWatch(k8s_api, tfk_ns, name) as watch, pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    took = time.monotonic() - t0
    assert len(watch.seen) == ROOM + 1, watch.seen  # every task's pod was made...
    assert watch.bound == {}, f"a gang one CPU short bound {sorted(watch.bound)}"  # ...and none bound
    assert err.value.reason == "Unschedulable", err.value
    assert 3 <= took < 30, took
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_without_the_gang_the_same_cluster_is_half_scheduled(k8s_api, tfk_ns, tfk_conn, pool) -> None:
    ctx, name, op = _train(tfk_ns, "no-gang-short", gang_spec(tfk_ns, pool, ROOM, "none"))
    with BindWatch(k8s_api, tfk_ns, name) as watch, pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    assert err.value.reason == "Unschedulable", err.value
    assert watch.most_bound_at_once == ROOM, sorted(watch.bound)  # all but one task hold a node
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_a_gang_that_fits_binds_every_pod_and_trains(k8s_api, tfk_ns, tfk_conn, pool) -> None:
    ctx, name, op = _train(tfk_ns, "gang-fits", gang_spec(tfk_ns, pool, ROOM - 1, "native"), cleanup="all")
    with BindWatch(k8s_api, tfk_ns, name) as watch, _tfk.PodDriver(k8s_api, tfk_ns, name):
        assert op.execute(ctx)["outcome"] == "succeeded"
    assert len(watch.bound) == len(watch.seen) == ROOM, (sorted(watch.seen), sorted(watch.bound))
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
