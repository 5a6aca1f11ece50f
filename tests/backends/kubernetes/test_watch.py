"""The wait's session on the Job watch (no server): what the Jobs' status says of each task,
and which pod reads it calls for. The reads themselves, against the HTTP double, are in
test_kubernetes.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_tfk.backends.kubernetes import watch as _k8s_watch
from airflow_tfk.backends.kubernetes.cluster import Interpreter
from airflow_tfk.backends.kubernetes.status import job_info
from airflow_tfk.backends.kubernetes.watch import FAILED, PENDING, WatchSession, failure_mark
from airflow_tfk.core.status import Phase
from tests.backends.pods import job, pod, scheduled, terminated, waiting


def counted(role: str, n: int, *, active: int, ready: int, failed: int = 0, completed: str = "") -> dict:
    """A Job whose status counts its pods as the Job controller does."""
    j = job(role, n, backoff_limit_per_index=1, completed=completed)
    j["status"].update(active=active, ready=ready, failed=failed)
    return j


def event(obj: dict[str, Any], kind: str = "MODIFIED") -> dict[str, Any]:
    return {"type": kind, "object": obj}


def session_with(*jobs: dict[str, Any]) -> WatchSession:
    s = WatchSession(Interpreter(300, 120))
    infos = [job_info(j) for j in jobs]
    s.set_jobs({i.role: i for i in infos if i is not None}, "1")
    return s


def phases(s: WatchSession, role: str) -> list[Phase]:
    status = s.changed_status() or s.tracker.snapshot()
    return [t.phase for t in status.of_role(role)]


def test_a_healthy_cluster_is_judged_from_the_jobs_alone():
    """Every pod ready: the tasks run, the finished ones succeed, and no pod read is due."""
    s = session_with(counted("worker", 4, active=4, ready=4), counted("ps", 1, active=1, ready=1))
    assert phases(s, "worker") == [Phase.RUNNING] * 4
    assert s.on_event(event(counted("worker", 4, active=2, ready=2, completed="0,2")))
    assert phases(s, "worker") == [Phase.SUCCEEDED, Phase.RUNNING, Phase.SUCCEEDED, Phase.RUNNING]
    assert s.failed_reads() == [] and s.pending_reads() == []


def test_pods_not_ready_are_read_soon_then_less_often(monkeypatch):
    """A Job with pods not ready: their phase is what its count says (as many running as
    are ready), and a page of its pending pods is due a moment later, then at growing gaps."""
    s = session_with(counted("worker", 3, active=3, ready=3))
    clock = [1000.0]
    monkeypatch.setattr(_k8s_watch.time, "monotonic", lambda: clock[0])
    s.on_event(event(counted("worker", 3, active=3, ready=1)))
    assert sorted(phases(s, "worker")) == sorted([Phase.RUNNING, Phase.PENDING, Phase.PENDING])
    assert s.pending_reads() == []
    clock[0] += _k8s_watch.PENDING_FIRST_READ
    assert s.pending_reads() == [("worker", 2)]
    unschedulable = scheduled("False", "Unschedulable", "0/1 nodes are available")
    stuck = pod("worker", 2, "Pending", conditions=[unschedulable], cluster="c")
    s.set_pods("worker", PENDING, [stuck])
    status = s.changed_status()
    assert status is not None and status.task("worker", 2).reason == "Unschedulable"  # type: ignore[union-attr]
    gaps = []
    for _ in range(6):
        clock[0] += 0.1
        due = s.next_due()
        gaps.append(round(due))
        clock[0] += due
        assert [r for r, _ in s.pending_reads()] == ["worker"]
        s.set_pods("worker", PENDING, [stuck])
    assert gaps == [2, 4, 8, 16, 30, 30], gaps
    # All ready again: no read due, and the pod read before no longer speaks for its task.
    s.on_event(event(counted("worker", 3, active=3, ready=3)))
    assert s.pending_reads() == [] and phases(s, "worker") == [Phase.RUNNING] * 3


def test_a_counted_failure_calls_for_its_pods_before_the_status_says_so():
    """The Job counts a failed pod: a read of the role's failed pods is due, and with it the
    task's failure is the pod's own (reason, exit code), not the Job's bare index."""
    s = session_with(counted("worker", 2, active=2, ready=2))
    s.changed_status()
    failed_job = counted("worker", 2, active=1, ready=1, failed=1)
    failed_job["spec"]["backoffLimitPerIndex"] = 0
    failed_job["status"]["failedIndexes"] = "1"
    s.on_event(event(failed_job))
    assert s.failed_reads() == ["worker"]
    mark = failure_mark(s.jobs["worker"])  # type: ignore[index]
    s.set_pods("worker", FAILED, [pod("worker", 1, "Failed", containers=terminated(3, message="boom"))], mark)
    assert s.failed_reads() == []
    status = s.changed_status()
    assert status is not None
    t = status.task("worker", 1)
    assert t is not None and (t.phase, t.reason, t.exit_code) == (Phase.FAILED, "ExitCode", 3), t


@pytest.mark.parametrize(
    "containers, reason",
    [
        (waiting("InvalidImageName"), "InvalidImageName"),
        (waiting("CrashLoopBackOff", last_exit=2), "CrashLoopBackOff"),
    ],
)
def test_a_wait_that_starts_on_pods_not_ready_reads_them_at_once(containers, reason):
    """A wait that (re)attaches to a cluster with pods not ready looks at them at once,
    running ones too (a container can fail in a running pod), and fails on a fatal one."""
    s = session_with(counted("worker", 2, active=2, ready=1))
    assert s.pending_reads() == [("worker", 1)] and s.thorough("worker")
    s.set_pods("worker", PENDING, [pod("worker", 0, "Running", containers=containers)])
    assert not s.thorough("worker")  # the next reads are of the pending pods only
    status = s.changed_status()
    assert status is not None
    t = status.task("worker", 0)
    assert t is not None and (t.phase, t.reason) == (Phase.FAILED, reason), t


def test_a_job_deleted_while_its_tasks_ran_fails_them():
    s = session_with(counted("worker", 2, active=2, ready=2), counted("ps", 1, active=1, ready=1))
    s.changed_status()
    s.on_event(event(counted("worker", 2, active=2, ready=2), "DELETED"))
    status = s.changed_status()
    assert status is not None and status.exists
    assert [(t.name, t.reason) for t in status.failed()] == [("worker-0", "Deleted"), ("worker-1", "Deleted")]
    s.on_event(event(counted("ps", 1, active=1, ready=1), "DELETED"))
    status = s.changed_status()
    assert status is not None and not status.exists


def test_a_job_event_judges_only_the_indexes_it_changed():
    """2,000 workers: a Job change re-judges the indexes whose word changed, not every task."""
    s = session_with(counted("worker", 2000, active=2000, ready=2000))
    s.changed_status()
    judged = []
    refresh = s.tracker._refresh
    s.tracker._refresh = lambda key, now: (judged.append(key), refresh(key, now))[1]  # type: ignore[method-assign]
    started = time.process_time()
    for done in range(1, 201):
        s.on_event(
            event(counted("worker", 2000, active=2000 - done, ready=2000 - done, completed=f"0-{done - 1}"))
        )
    assert len(judged) <= 2 * 200, len(judged)
    assert time.process_time() - started < 2.0
    status = s.changed_status()
    assert status is not None and status.count("worker", Phase.SUCCEEDED) == 200
    assert status.count("worker", Phase.RUNNING) == 1800


def test_a_retried_index_whose_new_pod_is_ready_runs():
    """An index retried after a failure: the failed pod read for its reason stays with the
    wait, but once the Job counts every pod ready the index runs (its new pod is ready)
    instead of staying "Retrying"; the retry is still counted."""
    s = session_with(counted("worker", 3, active=3, ready=3))
    s.changed_status()
    s.on_event(event(counted("worker", 3, active=2, ready=2, failed=1)))
    mark = failure_mark(s.jobs["worker"])  # type: ignore[index]
    s.set_pods("worker", FAILED, [pod("worker", 1, "Failed", containers=terminated(1))], mark)
    status = s.changed_status()
    assert status is not None
    t = status.task("worker", 1)
    assert t is not None and (t.phase, t.reason) == (Phase.PENDING, "Retrying"), t
    # the replacement pod starts, is read while pending, then turns ready
    s.on_event(event(counted("worker", 3, active=3, ready=2, failed=1)))
    s.set_pods("worker", PENDING, [pod("worker", 1, "Pending", attempt=1)])
    assert phases(s, "worker")[1] is Phase.PENDING
    s.on_event(event(counted("worker", 3, active=3, ready=3, failed=1)))
    assert phases(s, "worker") == [Phase.RUNNING] * 3
    status = s.tracker.snapshot()
    assert status.count("worker", Phase.RUNNING) == 3
    assert status.task("worker", 1).restarts == 1  # type: ignore[union-attr]
    # straight to ready with no pending read in between: the same
    s2 = session_with(counted("worker", 2, active=2, ready=2))
    s2.on_event(event(counted("worker", 2, active=1, ready=1, failed=1)))
    mark = failure_mark(s2.jobs["worker"])  # type: ignore[index]
    s2.set_pods("worker", FAILED, [pod("worker", 0, "Failed", containers=terminated(1))], mark)
    s2.on_event(event(counted("worker", 2, active=2, ready=2, failed=1)))
    assert phases(s2, "worker") == [Phase.RUNNING] * 2
