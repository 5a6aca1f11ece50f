"""Why a serving or TensorBoard pod cannot serve: table-tested on pod JSON as the kubelet
writes it (a Deployment's pods restart; a crash shows as restarts and a last state)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_tfk.serving._pods import PodHealth, describe, first_problem, is_running, pod_problem

NOW = 1_800_000_000.0


def pod(
    name: str = "tfs-m-abc",
    *,
    phase: str = "Running",
    ready: bool = False,
    waiting: str | None = None,
    last: tuple[str, int] | None = None,
    restarts: int = 0,
    running: bool = False,
    scheduled: dict[str, Any] | None = None,
    terminated: tuple[str, int] | None = None,
    status_reason: str | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if waiting:
        state["waiting"] = {"reason": waiting, "message": f"{waiting} detail"}
    if running:
        state["running"] = {"startedAt": "2027-01-15T08:00:00Z"}
    if terminated:
        state["terminated"] = {"reason": terminated[0], "exitCode": terminated[1]}
    cs: dict[str, Any] = {"name": "c", "state": state, "restartCount": restarts, "ready": ready}
    if last:
        cs["lastState"] = {"terminated": {"reason": last[0], "exitCode": last[1]}}
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled:
        conditions.append(scheduled)
    status: dict[str, Any] = {"phase": phase, "conditions": conditions, "containerStatuses": [cs]}
    if status_reason:
        status["reason"] = status_reason
    return {
        "metadata": {"name": name, "creationTimestamp": "2027-01-15T08:00:00Z"},
        "spec": {"containers": [{"name": "c"}]},
        "status": status,
    }


@pytest.mark.parametrize(
    ("p", "reason", "code"),
    [
        (pod(waiting="CrashLoopBackOff", last=("Error", 3), restarts=1), "CrashLoopBackOff", 3),
        (pod(waiting="CrashLoopBackOff", last=("OOMKilled", 137), restarts=2), "OOMKilled", 137),
        (pod(running=True, last=("OOMKilled", 137), restarts=1), "OOMKilled", 137),
        (pod(running=True, last=("Error", 1), restarts=2), "CrashLoopBackOff", 1),
        (pod(phase="Pending", waiting="ErrImagePull"), "ErrImagePull", None),
        (pod(phase="Pending", waiting="ImagePullBackOff"), "ImagePullBackOff", None),
        (pod(phase="Pending", waiting="ErrImageNeverPull"), "ErrImageNeverPull", None),
        (
            pod(
                phase="Pending",
                scheduled={
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 node(s) didn't match Pod's node selector.",
                },
            ),
            "Unschedulable",
            None,
        ),
        (pod(phase="Failed", terminated=("OOMKilled", 137)), "OOMKilled", 137),
        (pod(phase="Failed", terminated=("Error", 3)), "ExitCode", 3),
    ],
)
def test_a_pod_that_cannot_serve_fails_at_once_with_its_reason(
    p: dict, reason: str, code: int | None
) -> None:
    verdict = pod_problem(p, NOW)
    assert verdict is not None and verdict.reason == reason and verdict.exit_code == code, verdict


@pytest.mark.parametrize(
    "p",
    [
        pod(ready=True, running=True),
        pod(ready=True, running=True, last=("OOMKilled", 137), restarts=1),  # serves again
        pod(phase="Pending", waiting="ContainerCreating"),
        pod(phase="Pending"),
        pod(running=True, last=("Error", 1), restarts=1),  # one restart: not yet a loop
        pod(phase="Failed", status_reason="Evicted"),  # replaced by its ReplicaSet
        pod(  # a claim being provisioned
            phase="Pending",
            scheduled={
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            },
        ),
    ],
)
def test_a_pod_that_serves_or_may_still_start_is_no_problem(p: dict) -> None:
    assert pod_problem(p, NOW) is None


def test_one_ready_pod_means_the_server_serves() -> None:
    crashing = pod("a", waiting="CrashLoopBackOff", last=("Error", 1), restarts=3)
    assert first_problem([crashing, pod("b", ready=True, running=True)], NOW) is None
    found = first_problem([crashing, pod("b", phase="Pending")], NOW)
    assert found is not None and found[0]["metadata"]["name"] == "a"


def test_the_message_names_the_pod_the_reason_and_the_log_without_noise() -> None:
    p = pod("tfs-m-1", waiting="CrashLoopBackOff", last=("Error", 3), restarts=2)
    log = (
        "2027-01-15 08:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:1] noise\n"
        "loading /etc/tfk/models.config\nValueError: no such model base path\n"
    )
    text = describe(p, pod_problem(p, NOW), log)  # type: ignore[arg-type]
    assert text.startswith("pod tfs-m-1: CrashLoopBackOff (exit code 3)"), text
    assert "ValueError: no such model base path" in text and "cpu_feature_guard" not in text


class _Api:
    """Answers a pod list and a pod's log; records which log was asked for."""

    def __init__(self, pods: list[dict[str, Any]], logs: dict[bool, str]) -> None:
        self._pods, self.logs, self.asked = pods, logs, []

    def request(self, method: str, path: str, query: dict[str, Any]) -> tuple[int, Any]:
        assert method == "GET" and path.endswith("/pods") and "labelSelector" in query
        return 200, {"items": self._pods}

    def text(self, path: str, query: dict[str, Any]) -> str:
        previous = bool(query.get("previous"))
        self.asked.append(previous)
        return self.logs[previous]


def test_a_crash_loop_reads_the_log_of_the_run_that_crashed() -> None:
    health = PodHealth()
    health.api = _Api(
        [pod("tfs-m-1", waiting="CrashLoopBackOff", last=("Error", 3), restarts=2)],
        {True: "Error: cannot open model config\n", False: ""},
    )
    why = health.pod_failure("ns", "x=y")
    assert why is not None and "Error: cannot open model config" in why, why
    assert health.api.asked == [True]


def _starting(p: dict[str, Any]) -> dict[str, Any]:
    p["status"]["containerStatuses"][0]["started"] = False  # its startup probe has not passed
    return p


def _gone(p: dict[str, Any]) -> dict[str, Any]:
    p["metadata"]["deletionTimestamp"] = "2027-01-15T08:01:00Z"
    return p


@pytest.mark.parametrize(
    ("p", "running"),
    [
        (pod(running=True), True),  # started, its model not loaded yet: not Ready
        (pod(running=True, ready=True), True),
        (pod(phase="Pending", waiting="ContainerCreating"), False),
        (pod(waiting="CrashLoopBackOff", last=("Error", 3), restarts=1), False),
        (_gone(pod(running=True, ready=True)), False),  # terminating: leaves the Service
        (_starting(pod(running=True)), False),  # its server does not listen yet
        (pod(phase="Succeeded", terminated=("Completed", 0)), False),
    ],
)
def test_a_pod_runs_when_its_containers_run_and_it_is_not_going_away(p: dict, running: bool) -> None:
    assert is_running(p) is running
