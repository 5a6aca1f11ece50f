"""One topology domain for the whole cluster, on the real control plane with KWOK's nodes:
3 racks of 4 nodes, room for 2 pods per node (8 per rack). A 1 PS + 6 worker cluster with
``placement: {level: <rack label>, mode: required}`` lands in one rack, bound by the real
scheduler; a 10-pod cluster fits no rack and fails before anything is created, naming the
level and what each rack has."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from airflow_tfk.core.errors import CapacityError
from k8s_integration import _tfk
from tests.helpers import execute_in_thread

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

POOL = "tfk.test/placement-pool"
RACK = "tfk.test/rack"
RACKS, NODES_PER_RACK, PODS_PER_NODE = 3, 4, 2


@pytest.fixture(scope="module")
def racks(k8s_cluster, k8s_api) -> Iterator[str]:
    """The racks' nodes, tainted so that no other test's pod lands on them."""
    pool = f"p-{uuid.uuid4().hex[:6]}"
    nodes = {
        f"kwok-{pool}-r{r}-{i}": {RACK: f"rack-{r}"} for r in range(RACKS) for i in range(NODES_PER_RACK)
    }
    capacity = {"cpu": "8", "memory": "32Gi", "pods": str(PODS_PER_NODE)}
    with _tfk.node_pool(k8s_cluster, k8s_api, POOL, pool, nodes, capacity, ready_within=60) as name:
        yield name


def _spec(namespace: str, pool: str, workers: int, placed: bool = True) -> dict:
    extra = {"placement": {"level": RACK}} if placed else {}
    spec = _tfk.spec(namespace, "between_graph", workers=workers, ps=1, **extra)
    on_pool = {
        "resources": {"cpu": "100m"},
        "node_selector": {POOL: pool},
        "tolerations": [{"key": POOL, "operator": "Equal", "value": pool, "effect": "NoSchedule"}],
    }
    spec["worker"].update(on_pool)
    spec["ps"].update(on_pool)
    return spec


@pytest.mark.parametrize("placed", [True, False], ids=["placed", "control"])
def test_a_required_placement_binds_every_pod_in_one_rack(k8s_api, tfk_ns, tfk_conn, racks, placed) -> None:
    """The control, without ``placement``, shows the scheduler would spread the same pods."""
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    name = _tfk.cluster_name(ctx)
    core = client.CoreV1Api(k8s_api)
    op = _tfk.make_op(tfk_ns, _spec(tfk_ns, racks, workers=6, placed=placed), cleanup="all")
    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=lambda p: None):  # nobody ends: look at them
        thread, errors = execute_in_thread(op, ctx)
        try:
            bound = _tfk.wait_for(
                "every pod bound",
                lambda: (
                    pods
                    if len(pods := [p for p in _tfk.pods(k8s_api, tfk_ns, name) if p.spec.node_name]) == 7
                    else None
                ),
                timeout=90,
            )
            racks_used = {core.read_node(p.spec.node_name).metadata.labels[RACK] for p in bound}
            where = {p.metadata.name: p.spec.node_name for p in bound}
            assert (len(racks_used) == 1) is placed, where
            print(f"1 PS + 6 workers {'placed' if placed else 'not placed'}: bound in {sorted(racks_used)}")
        finally:
            op.on_kill()
            thread.join(90)
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name, timeout=90)


def test_a_cluster_that_fits_no_rack_fails_before_anything_is_created(
    k8s_api, tfk_ns, tfk_conn, racks
) -> None:
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    name = _tfk.cluster_name(ctx)
    with pytest.raises(CapacityError) as err:
        _tfk.make_op(tfk_ns, _spec(tfk_ns, racks, workers=9)).execute(ctx)
    message = str(err.value)
    assert f"no {RACK} domain has room for the whole cluster" in message, message
    assert "pods 10" in message and f"{RACK}=rack-0 has" in message and "pods 8" in message, message
    assert "nothing was created" in message
    assert _tfk.leftovers(k8s_api, tfk_ns, name) == []
