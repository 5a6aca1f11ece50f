"""The capacity pre-check: totals against allocatable minus what bound pods request,
per-role fit, node selectors, cordoned and NotReady nodes, and the lifecycle step that
warns or fails before anything is created, with a message naming the shortfall."""

from __future__ import annotations

import pytest

from airflow_tfk.backends.base import Backend
from airflow_tfk.core.errors import CapacityError
from airflow_tfk.run.lifecycle import check_capacity
from airflow_tfk.spec.capacity import check, task_requests
from airflow_tfk.spec.cluster import TFClusterSpec

GI = 2.0**30


def node(name, cpu="8", memory="32Gi", pods="110", gpus=None, labels=None, ready=True, cordoned=False):
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(node_name, cpu="1", memory="1Gi", phase="Running", limits=None, init=None):
    spec = {
        "nodeName": node_name,
        "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": limits or {}}}],
    }
    if init:
        spec["initContainers"] = [{"resources": {"requests": init}}]
    return {"spec": spec, "status": {"phase": phase}}


def spec(**changes):
    data = {
        "name": "big",
        "image": "tf:1",
        "command": ["python"],
        "mode": "between_graph",
        "ps": {"replicas": 2, "resources": {"cpu": "2", "memory": "4Gi"}},
        "worker": {"replicas": 4, "resources": {"cpu": "1", "memory": "2Gi"}},
    }
    data.update(changes)
    return TFClusterSpec.from_dict(data)


def test_task_requests_count_gpu_limits_and_memory_limits():
    s = spec(worker={"replicas": 1, "resources": {"cpu": "500m", "memory_limit": "3Gi", "gpus": 2}})
    assert task_requests(s.worker) == {"cpu": 0.5, "memory": 3 * GI, "nvidia.com/gpu": 2.0}


def test_fits_when_free_capacity_covers_the_totals():
    report = check(spec(), [node("a"), node("b")], [pod("a", cpu="6"), pod("b", cpu="1")])
    # needs cpu 2*2 + 4*1 = 8; free (8-6) + (8-1) = 9
    assert report.fits, report.message("big")
    assert report.needed["cpu"] == 8 and report.free["cpu"] == 9 and report.needed["pods"] == 6
    assert "fits" in report.message("big")


def test_shortfall_is_named_with_amounts():
    report = check(spec(), [node("a", cpu="4")], [pod("a", cpu="1"), pod("a", cpu="2", phase="Succeeded")])
    assert not report.fits
    assert report.short == {"cpu": 5.0}  # needs 8, 3 free (the finished pod holds nothing)
    text = report.message("big")
    assert "cpu: needs 8, 3 free, short by 5" in text and text.startswith("capacity check: cluster big")


def test_unbound_pending_pods_and_init_containers():
    # a pod not yet bound holds nothing; the biggest init container counts when bigger
    report = check(
        spec(), [node("a", cpu="12")], [pod(None, cpu="100"), pod("a", cpu="1", init={"cpu": "3"})]
    )
    assert report.free["cpu"] == 9 and report.fits


def test_gpus_and_memory():
    s = spec(worker={"replicas": 4, "resources": {"cpu": "1", "memory": "2Gi", "gpus": 1}})
    report = check(s, [node("a", gpus=2), node("b")], [pod("a", limits={"nvidia.com/gpu": "1"})])
    assert report.short == {"nvidia.com/gpu": 3.0}
    assert "nvidia.com/gpu: needs 4, 1 free, short by 3" in report.message("big")
    mem = check(spec(), [node("a", memory="10Gi")], [])
    assert mem.short == {"memory": 6 * GI}
    assert "memory: needs 16Gi, 10Gi free, short by 6Gi" in mem.message("big")


def test_only_ready_uncordoned_nodes_matching_the_selector_count():
    nodes = [
        node("gpu-1", labels={"pool": "gpu"}),
        node("cpu-1", labels={"pool": "cpu"}),
        node("gpu-down", labels={"pool": "gpu"}, ready=False),
        node("gpu-cordoned", labels={"pool": "gpu"}, cordoned=True),
    ]
    s = spec(
        worker={"replicas": 12, "resources": {"cpu": "1"}, "node_selector": {"pool": "gpu"}},
        ps=None,
        mode="all_reduce",
    )
    report = check(s, nodes, [])
    assert report.free["cpu"] == 8 and report.short == {"cpu": 4.0}


def test_a_task_bigger_than_any_node_is_named_even_if_the_total_fits():
    s = spec(worker={"replicas": 1, "resources": {"cpu": "10"}}, ps=None, mode="all_reduce")
    report = check(s, [node("a"), node("b")], [])
    assert not report.short and not report.fits
    assert report.unfit == ("no schedulable node has room for one worker task (cpu 10)",)
    assert "no schedulable node has room for one worker task (cpu 10)" in report.message("big")


class _Backend(Backend):
    """Only what the capacity step uses: ``kind`` and ``capacity_snapshot``."""

    kind = "fake"

    def __init__(self, snapshot):
        self.snapshot = snapshot

    def capacity_snapshot(self):
        return self.snapshot

    config = create = exists = status = logs = delete_roles = delete = find = owner = None  # type: ignore[assignment]


def test_lifecycle_step_off_warn_fail():
    short = ([node("a", cpu="1")], [])
    lines: list[str] = []
    check_capacity(_Backend(short), spec(), lines.append)  # off (default): not even asked
    assert lines == []
    check_capacity(_Backend(short), spec(capacity_check="warn"), lines.append)
    assert (
        lines[-1].startswith("WARNING capacity check: cluster big does not fit") and "short by 7" in lines[-1]
    )
    with pytest.raises(CapacityError, match=r"cpu: needs 8, 1 free, short by 7.*nothing was created"):
        check_capacity(_Backend(short), spec(capacity_check="fail"), lines.append)
    check_capacity(_Backend(([node("a", cpu="64")], [])), spec(capacity_check="fail"), lines.append)
    assert "fits" in lines[-1]
    check_capacity(_Backend(None), spec(capacity_check="fail"), lines.append)
    assert "skipped" in lines[-1]


# -- the local backend's cap on the processes of one cluster ---------------------------


def test_local_cap_comes_from_this_machine(monkeypatch):
    import os

    from airflow_tfk.spec import capacity

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": (8 * 2**30) // 4096}  # 8 GiB
    monkeypatch.setattr(os, "sysconf", lambda name: pages[name])
    assert capacity.local_max_tasks() == 16  # memory bounds it: 8 GiB / 512 MiB
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert capacity.local_max_tasks() == 8  # 4 per CPU
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert capacity.local_max_tasks() == capacity.LOCAL_TASKS_FLOOR


def _local_spec(workers: int, ps: int):
    from airflow_tfk.spec.cluster import TFClusterSpec

    return TFClusterSpec.from_dict(
        {
            "name": "big",
            "image": "x",
            "command": ["python", "-c", "pass"],
            "ps": {"replicas": ps},
            "worker": {"replicas": workers},
        }
    )


def test_the_local_backend_refuses_a_cluster_over_its_cap_before_starting_anything(tmp_path):
    from airflow_tfk.backends import get_backend
    from airflow_tfk.core.errors import LocalMachineError
    from airflow_tfk.spec.capacity import local_max_tasks

    backend = get_backend("local", root=str(tmp_path / "root"), workdir=str(tmp_path))
    assert backend.max_tasks == local_max_tasks()
    for call in (backend.preflight, backend.create):
        with pytest.raises(LocalMachineError, match="local backend's cap") as err:
            call(_local_spec(600, 64))
        assert err.value.field == "worker.replicas"
        assert str(local_max_tasks()) in str(err.value)
    with pytest.raises(LocalMachineError) as err:
        backend.create(_local_spec(1, 600))
    assert err.value.field == "ps.replicas"
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").rglob("state.json"))
    # the backend's config overrides the cap, and travels with it (triggerer, retries)
    raised = get_backend("local", root=str(tmp_path / "root"), max_tasks=700)
    raised.preflight(_local_spec(600, 64))
    assert raised.config()["max_tasks"] == 700
    for bad in (0, -1, "8", True, 1.5):
        with pytest.raises(LocalMachineError) as err:
            get_backend("local", root=str(tmp_path / "root"), max_tasks=bad)
        assert err.value.field == "max_tasks"


def _racks(pods_per_node: int = 2) -> list:
    return [
        node(f"r{r}-{i}", pods=str(pods_per_node), labels={"rack": f"r{r}"})
        for r in range(3)
        for i in range(4)
    ] + [node("loose", pods="110")]  # no rack label: in no domain


def test_placement_finds_a_domain_with_room_for_the_whole_cluster():
    from airflow_tfk.spec.capacity import domains

    fits, reports = domains(spec(), "rack", _racks(), [pod("r0-0"), pod("r0-1")])  # 6 pods; r0 has 6 left
    assert fits == "r0" and set(reports) == {"r0", "r1", "r2"}
    busy = [pod(f"r0-{i}") for i in range(4)]  # r0 is full: the next rack
    assert domains(spec(), "rack", _racks(), busy)[0] == "r1"


def test_placement_that_fits_no_domain_names_the_level_and_what_each_has():
    lines: list[str] = []
    big = spec(worker={"replicas": 9, "resources": {"cpu": "1"}}, placement={"level": "rack"})  # 11 pods
    with pytest.raises(CapacityError) as err:
        check_capacity(_Backend((_racks(), [])), big, lines.append)  # capacity_check off: still checked
    message = str(err.value)
    assert "placement: no rack domain has room for the whole cluster big (needs" in message, message
    assert "pods 11" in message and "rack=r0 has" in message and "pods 8" in message, message
    assert message.endswith("nothing was created")
    # preferred: not checked, and one that fits says where
    check_capacity(
        _Backend((_racks(), [])), spec(placement={"level": "rack", "mode": "preferred"}), lines.append
    )
    assert lines == []
    check_capacity(_Backend((_racks(), [])), spec(placement={"level": "rack"}), lines.append)
    assert lines == ["placement: rack=r0 has room for the whole cluster"]


def test_placement_without_labelled_nodes_says_so():
    with pytest.raises(CapacityError, match="no schedulable node has the label 'zone'"):
        check_capacity(_Backend(([node("a")], [])), spec(placement={"level": "zone"}), print)
