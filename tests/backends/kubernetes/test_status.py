"""Table tests: one pod (and its Job) as the API returns it -> the task's verdict.

The most branchy pure code of the backend; every row names the rule it pins."""

from __future__ import annotations

import pytest

from airflow_tfk.backends.kubernetes.status import (
    failure_action,
    job_info,
    parse_index_ranges,
    pod_verdict,
    task_key,
)
from airflow_tfk.core.status import Phase
from tests.backends.pods import T0_EPOCH, job, pod, scheduled, terminated, waiting

NOW = T0_EPOCH + 10
TIMEOUTS = {"unschedulable_timeout": 300.0, "image_pull_timeout": 120.0}

# (id, pod, now, expected (phase, reason, exit_code, terminal, has deadline))
VERDICTS = [
    ("succeeded", pod("worker", 0, "Succeeded"), NOW, (Phase.SUCCEEDED, "Completed", 0, True, False)),
    ("running", pod("worker", 0, "Running"), NOW, (Phase.RUNNING, "", None, False, False)),
    ("pending without reason", pod("worker", 0, "Pending"), NOW, (Phase.PENDING, "", None, False, False)),
    (
        "pending, container creating",
        pod("worker", 0, "Pending", containers=waiting("ContainerCreating")),
        NOW,
        (Phase.PENDING, "ContainerCreating", None, False, False),
    ),
    (
        "exit code",
        pod("worker", 0, "Failed", containers=terminated(3)),
        NOW,
        (Phase.FAILED, "ExitCode", 3, True, False),
    ),
    (
        "OOMKilled beats the exit code",
        pod("worker", 0, "Failed", containers=terminated(137, "OOMKilled")),
        NOW,
        (Phase.FAILED, "OOMKilled", 137, True, False),
    ),
    (
        "disruption (preemption)",
        pod(
            "worker",
            0,
            "Failed",
            containers=terminated(143),
            conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
        ),
        NOW,
        (Phase.FAILED, "PreemptionByScheduler", None, True, False),
    ),
    (
        "evicted (pod reason)",
        pod("worker", 0, "Failed", reason="Evicted", message="low on memory"),
        NOW,
        (Phase.FAILED, "Evicted", None, True, False),
    ),
    ("failed, nothing known", pod("worker", 0, "Failed"), NOW, (Phase.FAILED, "Error", None, True, False)),
    (
        "crash loop fails at once",
        pod("worker", 0, "Running", containers=waiting("CrashLoopBackOff", last_exit=2)),
        NOW,
        (Phase.FAILED, "CrashLoopBackOff", 2, False, False),
    ),
    (
        "invalid image name fails at once",
        pod("worker", 0, "Pending", containers=waiting("InvalidImageName")),
        NOW,
        (Phase.FAILED, "InvalidImageName", None, False, False),
    ),
    (
        "image pull back-off within its timeout",
        pod("worker", 0, "Pending", containers=waiting("ImagePullBackOff"), conditions=[scheduled()]),
        NOW,
        (Phase.PENDING, "ImagePullBackOff", None, False, True),
    ),
    (
        "image pull back-off past its timeout",
        pod("worker", 0, "Pending", containers=waiting("ErrImagePull"), conditions=[scheduled()]),
        T0_EPOCH + 121,
        (Phase.FAILED, "ErrImagePull", None, False, False),
    ),
    (
        "unschedulable within its timeout",
        pod("worker", 0, "Pending", conditions=[scheduled("False", "Unschedulable", "0/4 nodes")]),
        NOW,
        (Phase.PENDING, "Unschedulable", None, False, True),
    ),
    (
        # The condition's time is a whole second, cut down: the pod may have become
        # unschedulable up to a second later, so the timeout is not over yet.
        "unschedulable for its timeout by a whole-second stamp",
        pod("worker", 0, "Pending", conditions=[scheduled("False", "Unschedulable", "0/4 nodes")]),
        T0_EPOCH + 300,
        (Phase.PENDING, "Unschedulable", None, False, True),
    ),
    (
        "unschedulable past its timeout",
        pod("worker", 0, "Pending", conditions=[scheduled("False", "Unschedulable", "0/4 nodes")]),
        T0_EPOCH + 301,
        (Phase.FAILED, "Unschedulable", None, False, False),
    ),
]


@pytest.mark.parametrize(("p", "now", "expected"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS])
def test_pod_verdict(p, now, expected) -> None:
    v = pod_verdict(p, now, **TIMEOUTS)
    assert (v.phase, v.reason, v.exit_code, v.terminal, v.deadline is not None) == expected


def test_timeouts_count_from_the_scheduling_time() -> None:
    p = pod("worker", 0, "Pending", conditions=[scheduled("False", "Unschedulable")])
    assert pod_verdict(p, NOW, **TIMEOUTS).deadline == T0_EPOCH + 1 + 300  # the end of its whole-second stamp
    p = pod("worker", 0, "Pending", containers=waiting("ImagePullBackOff"), conditions=[scheduled()])
    assert pod_verdict(p, NOW, **TIMEOUTS).deadline == T0_EPOCH + 1 + 120


RULES = [
    {"action": "FailJob", "onExitCodes": {"containerName": "tensorflow", "operator": "In", "values": [3]}},
    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
]
ACTIONS = [
    ("permanent exit code", terminated(3), [], "FailJob"),
    ("other exit code", terminated(1), [], "Count"),
    ("disruption", terminated(143), [{"type": "DisruptionTarget", "status": "True"}], "Ignore"),
]


@pytest.mark.parametrize(
    ("containers", "conditions", "action"), [a[1:] for a in ACTIONS], ids=[a[0] for a in ACTIONS]
)
def test_pod_failure_policy_action(containers, conditions, action) -> None:
    info = job_info(job("worker", 2, rules=RULES))
    assert (
        failure_action(info, pod("worker", 0, "Failed", containers=containers, conditions=conditions))
        == action
    )


def test_without_a_job_every_failure_counts() -> None:
    assert failure_action(None, pod("worker", 0, "Failed", containers=terminated(3))) == "Count"


@pytest.mark.parametrize(
    ("text", "indexes"),
    [("", set()), ("0-3,7", {0, 1, 2, 3, 7}), ("5", {5}), ("1-2,x,4", {1, 2, 4})],
)
def test_index_ranges(text, indexes) -> None:
    assert parse_index_ranges(text) == indexes


def test_job_info_reads_retries_and_outcome() -> None:
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "too many"}
    info = job_info(
        job("worker", 4, backoff_limit_per_index=2, conditions=[failed], completed="0-1", failed="3")
    )
    assert info is not None
    assert (info.role, info.completions, info.backoff_limit_per_index, info.backoff_limit) == (
        "worker",
        4,
        2,
        6,
    )
    assert info.failed == ("BackoffLimitExceeded", "too many") and not info.complete
    assert info.completed_indexes == {0, 1} and info.failed_indexes == {3}
    assert job_info({"metadata": {"labels": {}}}) is None  # not one of ours


def test_task_key_from_the_controllers_index() -> None:
    assert task_key(pod("worker", 7)) == ("worker", 7)
    assert task_key(pod("ps", 2)) == ("ps", 2)
    unindexed = pod("ps", 1)
    del unindexed["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
    del unindexed["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
    assert task_key(unindexed) is None  # not a task of an Indexed Job
    assert task_key({"metadata": {"labels": {}}}) is None


def test_a_whole_second_stamp_stands_for_the_end_of_its_second() -> None:
    from airflow_tfk.backends.kubernetes.status import latest_instant, parse_time

    whole, exact = "2026-11-26T01:45:34Z", "2026-11-26T01:45:34.250000Z"
    assert latest_instant(whole) == parse_time(whole) + 1.0
    assert latest_instant(exact) == parse_time(exact)
    assert latest_instant(None) is None and latest_instant("not a time") is None
