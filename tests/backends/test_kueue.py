"""Kueue's pending reason, as the task log shows it while a cluster is queued: only the
cluster's own Workloads (owned by its JobSet, or its Jobs), admitted or
finished ones say nothing; and the wait loop asks only while there is no task yet."""

from __future__ import annotations

from airflow_tfk.backends._kueue import queue_message
from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.status import ClusterStatus, Phase, TaskStatus
from airflow_tfk.watch import QueueReporter

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


class _Backend:
    def __init__(self, answers):
        self.answers, self.asked = list(answers), 0

    def queue_message(self, ref):
        self.asked += 1
        return self.answers.pop(0)


def test_reporter_asks_only_while_no_task_exists_and_logs_changes():
    lines: list[str] = []
    backend = _Backend(["JobSet t queued: A", "JobSet t queued: A", "JobSet t queued: B"])
    rep = QueueReporter(backend, ClusterRef("t", "ns"), interval=0.0, emit=lines.append)  # type: ignore[arg-type]
    empty = ClusterStatus(tasks=(TaskStatus("worker", 0, Phase.PENDING),))  # a suspended Job's task
    running = ClusterStatus(
        tasks=(TaskStatus("worker", 0, Phase.RUNNING), TaskStatus("worker", 1, Phase.PENDING))
    )
    assert not rep.wants(running) and not rep.wants(ClusterStatus(exists=False))
    assert rep.wants(ClusterStatus())
    for _ in range(3):
        assert rep.wants(empty)
        rep.report()
    assert lines == ["queued: JobSet t queued: A", "queued: JobSet t queued: B"]
    slow = QueueReporter(_Backend([None]), ClusterRef("t", "ns"), interval=3600.0)  # type: ignore[arg-type]
    assert slow.wants(empty)
    slow.report()
    assert not slow.wants(empty)  # rate-limited


def test_kueues_first_answer_is_asked_for_sooner_and_a_queued_watch_ends_when_it_is_due(monkeypatch):
    """Right after the create Kueue has not looked yet: three quick reads (5 s apart), then
    the interval. A queued cluster has no pod, so no watch event: while it waits, the
    loop's watch window ends when the next read is due instead of after 60 s."""
    from airflow_tfk import watch
    from airflow_tfk.spec import Mode

    now = [1000.0]
    monkeypatch.setattr(watch.time, "monotonic", lambda: now[0])
    empty = ClusterStatus(tasks=(TaskStatus("worker", 0, Phase.PENDING),))
    rep = QueueReporter(_Backend([None] * 4 + ["A"]), ClusterRef("t", "ns"), interval=60.0)  # type: ignore[arg-type]
    for read in range(watch.QUEUE_QUICK_READS):
        assert rep.wants(empty)
        rep.report()
        quick = read < watch.QUEUE_QUICK_READS - 1
        assert rep.due_in() == (watch.QUEUE_QUICK_READ_SECONDS if quick else 60.0)
        now[0] += watch.QUEUE_QUICK_READ_SECONDS
    assert not rep.wants(empty)  # Kueue (or no Kueue) never answered: back to the interval

    backend = _Backend([None])
    loop = watch.WaitLoop(
        backend, ClusterRef("t", "ns"), Mode.ALL_REDUCE, {"worker": 1}, progress_interval=60.0
    )  # type: ignore[arg-type]
    monkeypatch.setattr(loop.reporter, "due", lambda: False)  # no progress reads here
    plan = loop.plan()
    assert next(plan) == watch.Watch(watch.WATCH_WINDOW_SECONDS)  # nothing known yet
    assert plan.send(None) == watch.NEXT_STATUS
    assert plan.send(empty) == watch.READ_QUEUE
    loop.queue.report()
    assert plan.send(None) == watch.Watch(watch.QUEUE_QUICK_READ_SECONDS)  # the 60 s window is cut short
    assert plan.send(None) == watch.NEXT_STATUS
    assert plan.send(empty) == watch.NEXT_STATUS  # the new watch's first status: nothing due yet
    now[0] += watch.QUEUE_QUICK_READ_SECONDS
    assert plan.send(None) == watch.Watch(watch.MIN_WATCH_WINDOW_SECONDS)  # window over: due now
    assert plan.send(None) == watch.NEXT_STATUS
    assert plan.send(empty) == watch.READ_QUEUE


def test_a_jobset_whose_jobs_are_being_made_is_not_a_deleted_cluster():
    """Seen with the real Kueue and JobSet controllers: a queued JobSet, for a moment, with
    no Job and no pod. While its JobSet exists that is not "deleted from outside"; without
    one it is."""
    from airflow_tfk.backends._k8s_cluster import Interpreter
    from airflow_tfk.backends._k8s_watch import WatchSession, _emit

    ref = ClusterRef("t", "ns")

    def run(jobsets: list[dict]) -> tuple[list[str], list[ClusterStatus], WatchSession]:
        session = WatchSession(Interpreter(unschedulable_timeout=300, image_pull_timeout=120))
        session.set_jobs({})
        session.reset([], "1")
        asked, out = [], []
        plan = _emit(ref, session)
        answer = None
        try:
            while True:
                step = plan.send(answer)
                if isinstance(step, ClusterStatus):
                    out.append(step)
                    answer = None
                    continue
                asked.append(step.path.rsplit("/", 1)[-1])
                answer = (200, {"items": jobsets if step.path.endswith("/jobsets") else []})
        except StopIteration:
            pass
        return asked, out, session

    asked, out, session = run([{"metadata": {"name": "t"}}])
    assert asked == ["jobsets"] and out == [] and session.deleted_reason is None
    assert session._jobs_due  # the Jobs are listed again soon
    asked, out, session = run([])
    assert asked == ["jobsets", "events"] and [s.exists for s in out] == [False]
