"""A capacity pre-check without Kueue: does the cluster fit in what the nodes have left?

Before anything is created, the cluster's total requests (CPU, memory, GPUs and any other
extended resource) are compared with the schedulable nodes' allocatable resources minus
what the pods already on them request. It also checks that the biggest task of each role
fits on at least one node. A half-scheduled TF cluster holds its nodes and waits forever,
so refusing it up front (``capacity_check: fail``) is better than discovering it through an
``Unschedulable`` timeout. ``warn`` only logs the shortfall.

It is an estimate: the scheduler also weighs node selectors, taints, affinity and pods
that come and go. Only nodes the tasks could land on are counted (their node selector
matches, they are not cordoned and they are Ready). Pure: the backend supplies the node
and pod lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec, quantity_value

__all__ = [
    "LOCAL_TASKS_FLOOR",
    "CapacityReport",
    "check",
    "check_local_tasks",
    "domains",
    "domains_message",
    "local_max_tasks",
    "task_requests",
]

_TERMINAL = ("Succeeded", "Failed")

# The local backend runs every task as a process of this machine, each a Python with
# TensorFlow loaded (a few hundred MB, one core busy). Its default cap on the tasks of one
# cluster: 4 per CPU, and one per 512 MiB of memory, whichever is smaller, but never
# under LOCAL_TASKS_FLOOR (what the examples and a first run need). The backend's
# ``max_tasks`` option overrides it.
LOCAL_TASKS_PER_CPU = 4
LOCAL_MEMORY_PER_TASK = 512 * 2**20
LOCAL_TASKS_FLOOR = 8


def local_max_tasks() -> int:
    """The local backend's default cap on the tasks of one cluster, from this machine."""
    import os

    by_cpu = LOCAL_TASKS_PER_CPU * (os.cpu_count() or 1)
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    by_memory = memory // LOCAL_MEMORY_PER_TASK if memory > 0 else by_cpu
    return max(LOCAL_TASKS_FLOOR, min(by_cpu, by_memory))


def check_local_tasks(spec: TFClusterSpec, cap: int) -> tuple[str, str] | None:
    """Why ``spec`` is too big for the local backend's ``cap``: (the field, the rule), or
    None when it fits."""
    total = spec.task_count()
    if total <= cap:
        return None
    biggest = max(spec.roles().items(), key=lambda item: item[1].replicas)[0]
    return (
        f"{biggest}.replicas",
        f"the cluster has {total} tasks, over the local backend's cap of {cap} processes on this "
        f"machine (max_tasks: 4 per CPU, one per 512 MiB, at least {LOCAL_TASKS_FLOOR}; raise it "
        "with the backend option max_tasks, or run on the kubernetes backend)",
    )


def task_requests(role: RoleSpec) -> dict[str, float]:
    """What one task asks the scheduler for. Like Kubernetes, an extended resource (a GPU)
    given only as a limit is requested at that limit; a memory limit without a request
    is the request too."""
    res = role.resources
    out: dict[str, float] = {}
    if res.cpu:
        out["cpu"] = quantity_value(res.cpu)
    memory = res.memory or res.memory_limit
    if memory:
        out["memory"] = quantity_value(memory)
    if res.gpus:
        out[res.gpu_resource] = float(res.gpus)
    return out


def cluster_requests(spec: TFClusterSpec) -> dict[str, float]:
    """What the whole cluster asks the scheduler for: every role's :func:`task_requests`
    times its replicas, summed."""
    total: dict[str, float] = {}
    for rs in spec.roles().values():
        for k, v in task_requests(rs).items():
            total[k] = total.get(k, 0.0) + v * rs.replicas
    return total


def _quantities(values: Mapping[str, Any] | None) -> dict[str, float]:
    out = {}
    for name, raw in (values or {}).items():
        try:
            out[name] = quantity_value(str(raw))
        except (KeyError, ValueError, AssertionError):
            continue  # a quantity this parser does not know cannot be counted
    return out


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """A pod's effective requests: the sum over its containers, or the largest init
    container when that is bigger (what the scheduler reserves)."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        resources = c.get("resources") or {}
        # an extended resource given only as a limit is requested at that limit
        reqs = {**_quantities(resources.get("limits")), **_quantities(resources.get("requests"))}
        for k, v in reqs.items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        resources = c.get("resources") or {}
        reqs = {**_quantities(resources.get("limits")), **_quantities(resources.get("requests"))}
        for k, v in reqs.items():
            total[k] = max(total.get(k, 0.0), v)
    return total


def _ready(node: Mapping[str, Any]) -> bool:
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _matches(node: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class CapacityReport:
    """The cluster's needs against what is free, and what is short."""

    needed: dict[str, float]
    free: dict[str, float]
    short: dict[str, float]  # resource -> missing amount
    unfit: tuple[str, ...]  # "<role>: ..." for roles whose task fits on no node

    @property
    def fits(self) -> bool:
        return not self.short and not self.unfit

    def message(self, cluster: str) -> str:
        if self.fits:
            needs = ", ".join(f"{k} {_fmt(k, v)}" for k, v in sorted(self.needed.items()))
            return f"capacity check: cluster {cluster} fits (needs {needs or 'no requests'})"
        parts = [
            f"{k}: needs {_fmt(k, self.needed[k])}, {_fmt(k, self.free.get(k, 0.0))} free, "
            f"short by {_fmt(k, v)}"
            for k, v in sorted(self.short.items())
        ]
        parts += list(self.unfit)
        return f"capacity check: cluster {cluster} does not fit the nodes' free capacity - " + "; ".join(
            parts
        )


def _fmt(resource: str, value: float) -> str:
    if resource == "memory" or resource.endswith("storage"):
        return f"{value / 2**30:.3g}Gi"
    return f"{value:g}"


def check(
    spec: TFClusterSpec, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> CapacityReport:
    """Compare ``spec``'s requests with the free capacity of ``nodes`` given the
    non-terminal ``pods`` bound to them."""
    nodes = [n for n in nodes if _ready(n)]
    used: dict[str, dict[str, float]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in _TERMINAL:
            continue
        bucket = used.setdefault(node_name, {})
        for k, v in pod_requests(pod).items():
            bucket[k] = bucket.get(k, 0.0) + v
        bucket["pods"] = bucket.get("pods", 0.0) + 1  # a node's allocatable pods count them
    free_by_node: dict[str, dict[str, float]] = {}
    for node in nodes:
        name = (node.get("metadata") or {}).get("name", "")
        allocatable = _quantities((node.get("status") or {}).get("allocatable"))
        taken = used.get(name, {})
        free_by_node[name] = {k: max(0.0, v - taken.get(k, 0.0)) for k, v in allocatable.items()}

    needed = cluster_requests(spec)
    free: dict[str, float] = {}
    unfit: list[str] = []
    counted: set[str] = set()
    for role, rs in spec.roles().items():
        per_task = task_requests(rs)
        candidates = [n for n in nodes if _matches(n, rs.node_selector)]
        # the free capacity counted once per node, over the nodes any role may use
        for n in candidates:
            name = (n.get("metadata") or {}).get("name", "")
            if name not in counted:
                counted.add(name)
                for k, v in free_by_node[name].items():
                    free[k] = free.get(k, 0.0) + v
        if per_task and not any(
            all(
                free_by_node[(n.get("metadata") or {}).get("name", "")].get(k, 0.0) >= v
                for k, v in per_task.items()
            )
            for n in candidates
        ):
            where = f" with labels {dict(rs.node_selector)}" if rs.node_selector else ""
            wants = ", ".join(f"{k} {_fmt(k, v)}" for k, v in sorted(per_task.items()))
            unfit.append(f"no schedulable node{where} has room for one {role} task ({wants})")
    if "pods" in free:  # nodes report how many pods they take: one per task
        needed["pods"] = float(spec.task_count())
    short = {k: v - free.get(k, 0.0) for k, v in needed.items() if v > free.get(k, 0.0) + 1e-9}
    return CapacityReport(needed, free, short, tuple(unfit))


def domains(
    spec: TFClusterSpec, level: str, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> tuple[str | None, dict[str, CapacityReport]]:
    """``placement``'s check: the first domain (a value of the node label ``level``) whose
    nodes have room for the whole cluster, or None; and every domain's report. Nodes
    without the label are in no domain."""
    nodes, pods = list(nodes), list(pods)
    by_domain: dict[str, list[Mapping[str, Any]]] = {}
    for node in nodes:
        value = ((node.get("metadata") or {}).get("labels") or {}).get(level)
        if value is not None:
            by_domain.setdefault(value, []).append(node)
    reports = {d: check(spec, members, pods) for d, members in sorted(by_domain.items())}
    fits = [d for d, report in reports.items() if report.fits]
    return (fits[0] if fits else None), reports


def domains_message(spec: TFClusterSpec, level: str, reports: Mapping[str, CapacityReport]) -> str:
    """Why no ``level`` domain has room for the cluster, naming the level and the domains
    closest to fitting."""
    needed = cluster_requests(spec)
    needed["pods"] = float(spec.task_count())
    needs = ", ".join(f"{k} {_fmt(k, v)}" for k, v in sorted(needed.items()))
    if not reports:
        return (
            f"placement: no schedulable node has the label {level!r}, so no {level} domain can "
            f"hold cluster {spec.name} (needs {needs})"
        )
    ranked = sorted(reports.items(), key=lambda item: sum(item[1].short.values()) + len(item[1].unfit))
    shown = []
    for domain, report in ranked[:3]:
        free = ", ".join(f"{k} {_fmt(k, report.free.get(k, 0.0))}" for k in sorted(needed))
        shown.append(f"{level}={domain} has {free}")
    more = f" and {len(ranked) - 3} more" if len(ranked) > 3 else ""
    return (
        f"placement: no {level} domain has room for the whole cluster {spec.name} (needs {needs}): "
        + "; ".join(shown)
        + more
    )
