"""ClusterTracker: the cluster status kept current pod event by pod event must equal the
status interpreted from scratch, and an event must cost one task, not the cluster."""

from __future__ import annotations

import random

import pytest

from airflow_tfk.backends.kubernetes import cluster as _k8s_cluster
from airflow_tfk.backends.kubernetes.cluster import ClusterTracker, Interpreter
from airflow_tfk.backends.kubernetes.status import job_info
from airflow_tfk.core.status import Phase
from airflow_tfk.run.policies import Outcome, evaluate
from airflow_tfk.spec.cluster import Mode
from tests.backends.pods import T0_EPOCH, job, pod, scheduled, terminated, with_status

NOW = T0_EPOCH + 10


def interp() -> Interpreter:
    return Interpreter(unschedulable_timeout=300, image_pull_timeout=120)


def jobs(*items: dict) -> dict:
    infos = [job_info(j) for j in items]
    return {i.role: i for i in infos if i is not None}


def from_scratch(pods: dict, job_map: dict | None, known: dict, ignored: set) -> tuple:
    fresh = interp()
    fresh.known.update(known)
    fresh.ignored_roles.update(ignored)
    status, _ = fresh.status(pods.values(), job_map, NOW)
    return status


def test_incremental_status_equals_the_status_from_scratch() -> None:
    rng = random.Random(7)
    job_map = jobs(job("worker", 12, backoff_limit_per_index=1), job("chief", 1))
    i = interp()
    tracker = ClusterTracker(i)
    tracker.reset([], job_map, NOW)
    pods: dict[str, dict] = {}
    for step in range(400):
        role, index = rng.choice([("worker", rng.randrange(12)), ("chief", 0), ("ps", rng.randrange(2))])
        same = [p for p in pods.values() if _key(p) == (role, index)]
        action = rng.random()
        if same and action < 0.15:
            gone = rng.choice(same)
            del pods[gone["metadata"]["uid"]]
            tracker.remove(gone, NOW)
        elif same and action < 0.7:
            old = rng.choice(same)
            phase, containers = rng.choice(
                [("Running", None), ("Succeeded", None), ("Failed", terminated(rng.choice([1, 3, 137])))]
            )
            new = with_status(old, phase, containers)
            pods[new["metadata"]["uid"]] = new
            tracker.upsert(new, NOW)
        else:
            new = pod(role, index, "Pending", attempt=len(same), conditions=[scheduled()])
            pods[new["metadata"]["uid"]] = new
            tracker.upsert(new, NOW)
        if step == 200:
            job_map = jobs(job("worker", 12, backoff_limit_per_index=1))  # the chief Job went away
            tracker.set_jobs(job_map, NOW)
        got = tracker.status(NOW)
        assert got == from_scratch(pods, job_map, dict(i.known), set()), f"step {step}"
        assert got.summary() == from_scratch(pods, job_map, dict(i.known), set()).summary()


def _key(p: dict) -> tuple[str, int]:
    from airflow_tfk.backends.kubernetes.status import task_key

    key = task_key(p)
    assert key is not None
    return key


def test_an_event_reinterprets_only_its_own_task(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = _k8s_cluster.pod_verdict

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(_k8s_cluster, "pod_verdict", counting)
    tracker = ClusterTracker(interp())
    workers = [pod("worker", i, "Running") for i in range(600)]
    tracker.reset(workers, jobs(job("worker", 600)), NOW)
    assert len(calls) == 600
    calls.clear()
    for w in workers[:50]:
        tracker.upsert(with_status(w, "Succeeded"), NOW)
        status = tracker.status(NOW)
    assert len(calls) == 50  # one task per event, whatever the cluster's size
    assert status.count("worker", Phase.SUCCEEDED) == 50 and status.count("worker", Phase.RUNNING) == 550
    assert evaluate(Mode.ALL_REDUCE, {"worker": 600}, status).outcome is Outcome.RUNNING


def test_a_failed_pod_with_retries_left_is_retrying_then_failed() -> None:
    tracker = ClusterTracker(interp())
    first = pod("worker", 0, "Running")
    tracker.reset([first], jobs(job("worker", 1, backoff_limit_per_index=1)), NOW)
    tracker.upsert(with_status(first, "Failed", terminated(1)), NOW)
    task = tracker.status(NOW).task("worker", 0)
    assert task is not None and (task.phase, task.reason) == (Phase.PENDING, "Retrying")
    second = pod("worker", 0, "Running", attempt=1)
    tracker.upsert(second, NOW)
    tracker.upsert(with_status(second, "Failed", terminated(1)), NOW)
    status = tracker.status(NOW)
    assert [(t.name, t.phase, t.reason) for t in status.failed()] == [("worker-0", Phase.FAILED, "ExitCode")]


def test_deleted_tasks_and_roles_deleted_on_purpose() -> None:
    i = interp()
    tracker = ClusterTracker(i)
    worker = pod("worker", 0, "Running")
    tracker.reset([worker], jobs(job("worker", 1)), NOW)
    tracker.remove(worker, NOW)
    tracker.set_jobs({}, NOW)  # the worker Job went away while its task ran
    tracker.upsert(pod("chief", 0, "Running"), NOW)
    task = tracker.status(NOW).task("worker", 0)
    assert task is not None and (task.phase, task.reason) == (Phase.FAILED, "Deleted")
    i.ignored_roles.update({"ps", "worker"})
    assert [t.role for t in tracker.status(NOW).tasks] == ["chief"]


def test_a_ps_job_pod_deleted_is_pending_its_replacement_and_its_deadline_fails_it() -> None:
    """The PS is an Indexed Job: a deleted pod is replaced by the Job (pending), and the
    cluster-side deadline fails it like any Job task."""
    tracker = ClusterTracker(interp())
    ps = pod("ps", 0, "Running")
    tracker.reset([ps, pod("worker", 0, "Running")], jobs(job("ps", 1), job("worker", 1)), NOW)
    tracker.remove(ps, NOW)
    assert tracker.status(NOW).task("ps", 0).phase is Phase.PENDING
    deadline = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long"}
    past = job("ps", 1, conditions=[deadline])
    tracker.set_jobs(jobs(past, job("worker", 1)), NOW)
    task = tracker.status(NOW).task("ps", 0)
    assert (task.phase, task.reason) == (Phase.FAILED, "DeadlineExceeded")


def test_a_timeout_turns_a_task_failed_without_an_event() -> None:
    tracker = ClusterTracker(interp())
    stuck = pod("worker", 0, "Pending", conditions=[scheduled("False", "Unschedulable", "0/4 nodes")])
    tracker.reset([stuck], jobs(job("worker", 1)), NOW)
    assert tracker.status(NOW).task("worker", 0).phase is Phase.PENDING
    assert tracker.next_deadline() == T0_EPOCH + 1 + 300  # the end of the condition's whole second
    tracker.snapshot()
    tracker.advance(T0_EPOCH + 301)
    assert tracker.changed
    task = tracker.snapshot().task("worker", 0)
    assert task is not None and (task.phase, task.reason) == (Phase.FAILED, "Unschedulable")
    assert tracker.next_deadline() is None


def test_no_change_no_new_status() -> None:
    tracker = ClusterTracker(interp())
    w = pod("worker", 0, "Running")
    tracker.reset([w], jobs(job("worker", 1)), NOW)
    tracker.snapshot()
    tracker.upsert(with_status(w, "Running"), NOW)  # a new resourceVersion, same verdict
    assert not tracker.changed
    tracker.reset([w], tracker.jobs, NOW)  # a relist that finds what we had
    assert not tracker.changed


def test_a_job_past_its_deadline_fails_its_unfinished_tasks() -> None:
    """The Job controller fails a Job at its activeDeadlineSeconds and removes its running
    pods: the tasks left without a pod are failed DeadlineExceeded, the finished one stays
    succeeded. (Moved from the HTTP double's Job conditions; the real API server's run of
    a deadline: tests/k8s_integration/test_fault_suite.py.)"""
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "DeadlineExceeded",
        "message": "Job was active longer than specified deadline",
    }
    job_map = jobs(job("worker", 3, conditions=[failed], completed="2"))
    status, _ = interp().status([pod("worker", 2, "Succeeded")], job_map, NOW)
    assert [(t.phase, t.reason) for t in status.of_role("worker")] == [
        (Phase.FAILED, "DeadlineExceeded"),
        (Phase.FAILED, "DeadlineExceeded"),
        (Phase.SUCCEEDED, "Completed"),
    ]
