"""A pod's run as usage counts it: from its containers' start to their end, times the
pod's effective requests (limits standing in for missing requests, the largest init
container when bigger), as the API server reports them."""

from __future__ import annotations

from airflow_tfk.backends.kubernetes.usage import pod_span, pods_usage
from airflow_tfk.core import naming

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _pod(
    name: str, role: str, states: list[dict], requests: dict | None = None, limits: dict | None = None
) -> dict:
    return {
        "metadata": {"name": name, "labels": {naming.LABEL_ROLE: role}},
        "spec": {
            "containers": [{"name": "tf", "resources": {"requests": requests or {}, "limits": limits or {}}}]
        },
        "status": {"containerStatuses": [{"name": "tf", "state": s} for s in states]},
    }


def test_a_finished_pod_counts_from_start_to_finish():
    pod = _pod(
        "t-worker-0-x",
        "worker",
        [
            {
                "terminated": {
                    "startedAt": "2027-01-15T07:00:00Z",
                    "finishedAt": "2027-01-15T07:01:30Z",
                    "exitCode": 0,
                }
            }
        ],
        {"cpu": "1500m", "memory": "2Gi"},
    )
    (u,) = pods_usage([pod], NOW)
    assert (u.task, u.role, u.seconds) == ("t-worker-0-x", "worker", 90.0)
    assert u.cores == 1.5 and u.memory_gib == 2.0


def test_a_running_pod_counts_until_now_and_a_pending_one_not_at_all():
    running = _pod("ps", "ps", [{"running": {"startedAt": "2027-01-15T07:59:00Z"}}], {"cpu": "250m"})
    pending = _pod("w", "worker", [{"waiting": {"reason": "ContainerCreating"}}], {"cpu": "1"})
    assert pod_span(running, NOW) == 60.0
    assert pod_span(pending, NOW) == 0.0
    assert pod_span({"status": {}}, NOW) == 0.0


def test_limits_stand_in_for_requests_and_accelerators_count():
    pod = _pod(
        "c",
        "chief",
        [{"running": {"startedAt": "2027-01-15T07:59:50Z"}}],
        {"cpu": "2"},
        {"nvidia.com/gpu": "2", "memory": "8Gi"},
    )
    (u,) = pods_usage([pod], NOW)
    assert (u.cores, u.memory_gib, u.accelerators, u.seconds) == (2.0, 8.0, 2.0, 10.0)


def test_a_sidecar_counts_the_pod_until_its_last_container_ends():
    pod = _pod(
        "e",
        "evaluator",
        [
            {"terminated": {"startedAt": "2027-01-15T07:00:00Z", "finishedAt": "2027-01-15T07:00:10Z"}},
            {"terminated": {"startedAt": "2027-01-15T07:00:02Z", "finishedAt": "2027-01-15T07:00:30Z"}},
        ],
    )
    assert pod_span(pod, NOW) == 30.0
