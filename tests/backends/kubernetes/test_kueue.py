"""Kueue's pending reason, as the task log shows it while a cluster is queued: only the
cluster's own Workloads (owned by its JobSet, or its Jobs), admitted or
finished ones say nothing; and the wait loop asks only while there is no task yet."""

from __future__ import annotations

import asyncio

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.kueue import queue_message
from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus
from airflow_tfk.run.wait import QueueReporter

PENDING = (
    "couldn't assign flavors to pod set worker: insufficient quota for cpu in flavor default-flavor, "
    "4 more needed"
)


def workload(owner_kind, owner_name, conditions, queue="team-a"):
    return {
        "metadata": {
            "name": f"x-{owner_name}",
            "ownerReferences": [{"kind": owner_kind, "name": owner_name}],
        },
        "spec": {"queueName": queue},
        "status": {"conditions": conditions},
    }


def pending(message=PENDING):
    return [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}]


def test_pending_jobset_is_reported_with_kueues_reason():
    wls = [workload("JobSet", "train-1", pending()), workload("JobSet", "train-10", pending("other"))]
    assert queue_message(wls, "train-1") == f"JobSet train-1 queued in LocalQueue team-a: {PENDING}"


def test_jobs_layout_workloads_and_admitted_ones():
    wls = [
        workload("Job", "t-worker", pending()),
        workload("Job", "t-ps", [{"type": "Admitted", "status": "True"}]),
        workload("Job", "t-chief", [{"type": "QuotaReserved", "status": "False", "reason": "Pending"}]),
        workload("Job", "t-workers", pending()),  # not a role object of cluster t
    ]
    assert queue_message(wls, "t") == (
        "Job t-chief queued in LocalQueue team-a: Pending; "
        f"Job t-worker queued in LocalQueue team-a: {PENDING}"
    )
    admitted = [workload("JobSet", "t", [{"type": "Admitted", "status": "True"}])]
    finished = [workload("JobSet", "t", [{"type": "Finished", "status": "True"}])]
    assert queue_message(admitted, "t") is None and queue_message(finished, "t") is None
    assert queue_message([], "t") is None
    fresh = [workload("JobSet", "t", [])]
    assert (
        queue_message(fresh, "t") == "JobSet t queued in LocalQueue team-a: waiting for Kueue to look at it"
    )


class _Watcher:
    """The reads a wait makes, answered from a script: Kueue's answers in order; no
    status change ever after the ``statuses`` given, each wait for one moving ``now``."""

    def __init__(self, answers, statuses=(), now=None):
        self.answers, self.asked = list(answers), 0
        self.statuses, self.now, self.waits = list(statuses), now, []

    async def queue_message(self):
        self.asked += 1
        return self.answers.pop(0)

    async def logs(self, role, index, tail_lines=None):
        return ""

    async def next(self, timeout):
        self.waits.append(timeout)
        if self.statuses:
            return self.statuses.pop(0)
        if len(self.waits) > 6:
            raise _Enough
        self.now[0] += timeout
        return None


class _Enough(Exception):
    pass


def test_reporter_asks_only_while_no_task_exists_and_logs_changes():
    lines: list[str] = []
    watcher = _Watcher(["JobSet t queued: A", "JobSet t queued: A", "JobSet t queued: B"])
    rep = QueueReporter(interval=0.0, emit=lines.append)
    empty = ClusterStatus(tasks=(TaskStatus("worker", 0, Phase.PENDING),))  # a suspended Job's task
    running = ClusterStatus(
        tasks=(TaskStatus("worker", 0, Phase.RUNNING), TaskStatus("worker", 1, Phase.PENDING))
    )
    assert not rep.wants(running) and not rep.wants(ClusterStatus(exists=False))
    assert rep.wants(ClusterStatus())
    for _ in range(3):
        assert rep.wants(empty)
        asyncio.run(rep.read(watcher))  # type: ignore[arg-type]
    assert lines == ["queued: JobSet t queued: A", "queued: JobSet t queued: B"]
    slow = QueueReporter(interval=3600.0)
    assert slow.wants(empty)
    asyncio.run(slow.read(_Watcher([None])))  # type: ignore[arg-type]
    assert not slow.wants(empty)  # rate-limited


def test_kueues_first_answer_is_asked_for_sooner_and_a_queued_wait_wakes_when_it_is_due(monkeypatch):
    """Right after the create Kueue has not looked yet: three quick reads (5 s apart), then
    the interval. A queued cluster has no pod, so no status change: while it waits, the
    loop wakes when the next read is due instead of after its longest sleep."""
    import contextlib

    import pytest

    from airflow_tfk.run import wait as watch
    from airflow_tfk.spec.cluster import Mode

    now = [1000.0]
    monkeypatch.setattr(watch.time, "monotonic", lambda: now[0])
    empty = ClusterStatus(tasks=(TaskStatus("worker", 0, Phase.PENDING),))
    watcher = _Watcher([None] * 4 + ["A"] * 3, [empty], now)

    class Backend:
        def watcher(self, ref):
            return contextlib.nullcontext(watcher)

    wait = watch.Wait(
        Backend(), ClusterRef("t", "ns"), Mode.ALL_REDUCE, {"worker": 1}, progress_interval=60.0
    )  # type: ignore[arg-type]
    monkeypatch.setattr(wait.reporter, "due_in", lambda: 3600.0)  # no progress reads here
    with pytest.raises(_Enough):
        asyncio.run(wait.run())
    quick, slow = watch.QUEUE_QUICK_READ_SECONDS, 60.0
    # nothing known yet; then three unanswered quick reads, then the interval
    assert watcher.waits == [watch.WAKE_SECONDS_MAX, quick, quick, slow, slow, slow, slow], watcher.waits
    assert watcher.asked == 6  # one read per wake-up: none in between


def test_a_jobset_whose_jobs_are_being_made_is_not_a_deleted_cluster():
    """Seen with the real Kueue and JobSet controllers: a queued JobSet, for a moment, with
    no Job and no pod. While its JobSet exists that is not "deleted from outside"; without
    one it is."""
    from airflow_tfk.backends.kubernetes.cluster import Interpreter
    from airflow_tfk.backends.kubernetes.watch import KubernetesWatcher

    ref = ClusterRef("t", "ns")

    class Api:
        def __init__(self, jobsets):
            self.jobsets, self.asked = jobsets, []

        async def request(self, method, path, query=None, body=None):
            self.asked.append(path.rsplit("/", 1)[-1])
            return 200, {"items": self.jobsets if path.endswith("/jobsets") else []}

    def run(jobsets: list[dict]) -> tuple[list[str], list[ClusterStatus], KubernetesWatcher]:
        api = Api(jobsets)
        watcher = KubernetesWatcher(None, ref, api, Interpreter(300, 120), {})  # type: ignore[arg-type]
        watcher.session.set_jobs({}, "1")

        async def emit() -> list[ClusterStatus]:
            await watcher._emit()
            queued = watcher._statuses
            return [queued.get_nowait() for _ in range(queued.qsize())]  # type: ignore[misc]

        return api.asked, asyncio.run(emit()), watcher

    asked, out, watcher = run([{"metadata": {"name": "t"}}])
    assert asked == ["jobsets"] and out == [] and watcher.session.deleted_reason is None
    asked, out, watcher = run([])
    assert asked == ["jobsets", "events"] and [s.exists for s in out] == [False]
