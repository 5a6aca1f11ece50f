"""Eviction and drain against the real API server and Job controller: a worker pod
evicted through the Eviction API (what ``kubectl drain`` sends for every pod of a node),
or stopped by its kubelet's graceful node shutdown, is replaced and the replacement
finishes the training, with ``retries_per_index: 0``, so a disruption counted against
the retry budget would fail it; the Job counts no failure.

KWOK has no containers: the test plays the kubelet's part. The kubelet marks the pod
(``DisruptionTarget``) on a node shutdown, and ends a container stopped by SIGTERM with
exit code 143 and phase ``Failed``; the Job controller replaces a pod being deleted only
once it is terminal, so the evicted pod is given that end too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from k8s import harness
from kubernetes import client

from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures


def _run(op: Any, ctx: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = op.execute(ctx)
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def _hold_worker_0(taken: list[str]) -> Callable[[client.V1Pod], dict[str, str] | None]:
    """A PodDriver rule: worker 0 trains until the test has taken it (named in ``taken``);
    every other running task, and worker 0's replacement, succeeds after 1 s."""

    def rule(pod: client.V1Pod) -> dict[str, str] | None:
        if pod.status.phase != "Running":
            return None
        if _tfk.index_of(pod) == 0 and not taken:
            return None
        if pod.metadata.name in taken:  # the test ends it (CI: a success set here overwrote it)
            return None
        return {harness.EXIT_CODE: "0", harness.EXIT_DELAY: "1s"}

    return rule


def _running_worker(api, ns: str, cluster: str, index: int) -> client.V1Pod:
    def found() -> client.V1Pod | None:
        for p in _tfk.pods(api, ns, cluster, "worker"):
            if (
                _tfk.index_of(p) == index
                and p.status.phase == "Running"
                and p.metadata.deletion_timestamp is None
            ):
                return p
        return None

    return _tfk.wait_for(f"worker-{index} Running", found, 60)


def _job_status(api, ns: str, name: str) -> client.V1JobStatus:
    """The Job's status once the Job controller has counted both indexes (it may count
    after the watch has seen the pods end)."""

    def counted() -> client.V1JobStatus | None:
        status = client.BatchV1Api(api).read_namespaced_job_status(name, ns).status
        return status if status.succeeded == 2 else None

    return _tfk.wait_for(f"{name} counted 2 succeeded", counted, 30)


def test_a_worker_stopped_by_a_node_shutdown_is_replaced_without_counting_a_failure(
    k8s_api, tfk_ns, tfk_conn
) -> None:
    """A kubelet's graceful node shutdown (what a spot node's reclaim or a node upgrade
    does): the kubelet marks the pod (DisruptionTarget, TerminationByKubelet) and stops
    its container on SIGTERM."""
    reason = "TerminationByKubelet"
    ctx = _tfk.task_context("manual__node-shutdown")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, "all_reduce", workers=2, ps=0, retries_per_index=0))
    disrupted: list[str] = []

    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=_hold_worker_0(disrupted)) as driver:
        thread, box = _run(op, ctx)
        victim = _running_worker(k8s_api, tfk_ns, name, 0)
        core = client.CoreV1Api(k8s_api)
        # what the kubelet writes first ...
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": "disrupted by the test",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        core.patch_namespaced_pod_status(
            victim.metadata.name, tfk_ns, {"status": {"conditions": [condition]}}
        )
        disrupted.append(victim.metadata.name)
        # ... then the container's end on SIGTERM
        _tfk.annotate(k8s_api, tfk_ns, victim.metadata.name, {harness.EXIT_CODE: "143"})
        thread.join(120)
        assert not thread.is_alive(), "the training did not end"
        assert not driver.errors, driver.errors
    assert "error" not in box, box.get("error")
    assert box["result"]["outcome"] == "succeeded", box["result"]
    status = _job_status(k8s_api, tfk_ns, f"{name}-worker")
    # the Job controller ignored the disrupted pod: no failure counted, no failed index
    assert not status.failed, status
    assert not status.failed_indexes, status
    pods = _tfk.pods(k8s_api, tfk_ns, name, "worker")
    ended = next(p for p in pods if p.metadata.name == disrupted[0])
    conditions = {c.type: c for c in ended.status.conditions or []}
    assert ended.status.phase == "Failed" and conditions["DisruptionTarget"].reason == reason
    assert len([p for p in pods if _tfk.index_of(p) == 0]) == 2  # the replacement ran index 0


def _stopped_by_kubelet(api, ns: str, pod: client.V1Pod) -> None:
    """What a kubelet writes once the container has ended on SIGTERM: phase Failed, exit
    code 143 (KWOK has no container to stop, and the Job controller replaces a pod that
    is being deleted only once it is terminal)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ended = {"exitCode": 143, "reason": "Error", "startedAt": now, "finishedAt": now}
    statuses = [
        {
            "name": c.name,
            "image": c.image,
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": ended},
        }
        for c in pod.spec.containers
    ]
    client.CoreV1Api(api).patch_namespaced_pod_status(
        pod.metadata.name, ns, {"status": {"phase": "Failed", "containerStatuses": statuses}}
    )


def test_an_eviction_through_the_eviction_api_is_not_counted(k8s_api, tfk_ns, tfk_conn) -> None:
    """The real Eviction API request on a running worker: the API server marks the pod
    (DisruptionTarget, EvictionByEvictionAPI) and deletes it; the test then ends its
    container as a kubelet would, and the Job controller replaces it without counting."""
    ctx = _tfk.task_context("manual__evict")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, "all_reduce", workers=2, ps=0, retries_per_index=0))
    evicted: list[str] = []

    core = client.CoreV1Api(k8s_api)
    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=_hold_worker_0(evicted)) as driver:
        thread, box = _run(op, ctx)
        victim = _running_worker(k8s_api, tfk_ns, name, 0)
        evicted.append(victim.metadata.name)
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=victim.metadata.name, namespace=tfk_ns))
        core.create_namespaced_pod_eviction(victim.metadata.name, tfk_ns, body)

        def marked() -> client.V1Pod | None:
            pod = core.read_namespaced_pod(victim.metadata.name, tfk_ns)
            conditions = {c.type: c for c in pod.status.conditions or []}
            disruption = conditions.get("DisruptionTarget")
            return pod if pod.metadata.deletion_timestamp and disruption is not None else None

        pod = _tfk.wait_for("the evicted pod marked and deleting", marked, 30)
        reason = next(c.reason for c in pod.status.conditions if c.type == "DisruptionTarget")
        assert reason == "EvictionByEvictionAPI", reason
        _stopped_by_kubelet(k8s_api, tfk_ns, pod)
        thread.join(120)
        assert not thread.is_alive(), "the training did not end"
        assert not driver.errors, driver.errors
    assert "error" not in box, box.get("error")
    assert box["result"]["outcome"] == "succeeded", box["result"]
    status = _job_status(k8s_api, tfk_ns, f"{name}-worker")
    assert not status.failed and not status.failed_indexes, status
