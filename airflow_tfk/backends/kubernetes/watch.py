"""What a wait reads from Kubernetes: one Job watch for the whole wait, and the pods only
when a Job says some are in trouble.

Why Jobs and not pods: a Job's status carries what the success policies need (completed
and failed indexes, the Failed condition) and how many of its pods run and are ready, in
one object per role, so what a wait reads and keeps is flat in the number of workers (a
pod watch read every pod several times: 80 MB at 2,000 workers). Pods are read, by a list
limited to the role and to one phase, only for what a Job cannot say:

- a Job counts a failure the last read did not see: its failed pods, before the status
  that shows the failure, so the verdict has the pod's reason and exit code;
- a Job has pods that are not ready: a page of its pending pods, soon and then less and
  less often (and when a timeout of one of them is due), for Unschedulable, image pull
  and container errors;
- a Job runs fewer pods than it has indexes left: its ``FailedCreate`` Events, at the
  same pace, for pods the API server refused (:mod:`.refusal`).

:class:`KubernetesWatcher` lists the Jobs once and keeps a single Job watch open, from its
resourceVersion, for as long as the wait lasts; its one-shot reads (a task's log, Kueue's
reason) are the request plans of :mod:`.reads`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from contextlib import aclosing
from typing import Any

from airflow_tfk.backends.base import Backend, ClusterRef, ClusterWatcher
from airflow_tfk.backends.kubernetes.cluster import ClusterTracker, Interpreter
from airflow_tfk.backends.kubernetes.plan import LIST_PAGE, Plan, Request, arun, list_plan, reraise
from airflow_tfk.backends.kubernetes.reads import (
    ACTIVITY_LOG,
    deleted_reason_plan,
    jobs_of,
    jobset_exists_plan,
    pod_log_plan,
    queue_plan,
    refusal_plan,
)
from airflow_tfk.backends.kubernetes.refusal import Refusal, short_of_pods
from airflow_tfk.backends.kubernetes.status import (
    JobInfo,
    is_ready,
    job_info,
    log_line_time,
)
from airflow_tfk.core import naming
from airflow_tfk.core.status import Activity, ClusterStatus
from airflow_tfk.kube.api import BY_KIND, AsyncApi, error_message
from airflow_tfk.kube.retry import is_transient

log = logging.getLogger(__name__)

# A Job with pods that are not ready: its pending pods are read this soon, then at twice
# the last gap, up to the most (a 2,000-worker start takes tens of seconds; each read is
# one page, so it costs the same at any size).
PENDING_FIRST_READ = 2.0
PENDING_READ_MAX = 30.0
PENDING_PAGE = 100
MAX_WATCH_SECONDS = 300
STREAM_RETRIES = 5
# Statuses the watch may run ahead of the wait before it stops reading the stream.
QUEUED_STATUSES = 256
FAILED, PENDING, RUNNING = "Failed", "Pending", "Running"
MANY_PAGES = 40  # 20,000 pods: every pod of the largest cluster a spec allows


def failure_mark(job: JobInfo | None) -> tuple[Any, ...]:
    """What a Job says of its failures: a read of its failed pods is due when it changes."""
    if job is None:
        return (0, frozenset(), None)
    return (job.failed_pods, job.failed_indexes, job.failed)


class WatchSession:
    """State of one wait: the Jobs, the pods read for trouble, the Job watch's
    resourceVersion, when each read is due. No I/O."""

    def __init__(self, interp: Interpreter) -> None:
        self.tracker = ClusterTracker(interp, partial=True)
        self.rv: str | None = None
        self.events = 0  # Job events applied
        self._jobs: dict[str, JobInfo] = {}
        self._pods: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (role, phase) -> pods
        self._failures_read: dict[str, tuple[Any, ...]] = {}  # role -> failure_mark read at
        self._pending_due: dict[str, float] = {}  # role -> monotonic time of its next read
        self._pending_gap: dict[str, float] = {}
        self._thorough: set[str] = set()  # roles whose next read looks at running pods too
        self._refusal_due: dict[str, float] = {}  # role short of pods -> its next Events read
        self._refusal_gap: dict[str, float] = {}
        self.log_pods: dict[tuple[str, int], list[dict[str, Any]]] = {}  # the pod a log read found
        self._deadline: float | None = None  # wall clock: a timeout may flip a task
        self._failures = 0
        self._watch_ends = math.inf  # monotonic end of the current watch request
        self._yielded_reason: str | None = None
        self.deleted_reason: str | None = None  # looked up once the cluster is gone

    @property
    def jobs(self) -> dict[str, JobInfo] | None:
        return self.tracker.jobs

    def set_jobs(self, jobs: dict[str, JobInfo], rv: str | None = None) -> None:
        """A fresh list of the Jobs (and where their watch starts). A Job that already has
        pods not ready (a wait that reattaches) has them read at once, running ones too."""
        self._jobs = dict(jobs)
        self.rv = rv or "0"
        for role, job in jobs.items():
            if job.ready is not None and job.active > job.ready and role not in self._pending_due:
                self._pending_due[role] = time.monotonic()
                self._thorough.add(role)
            if short_of_pods(job) and role not in self._refusal_due:
                self._refusal_due[role] = time.monotonic()
        self._update()

    def on_event(self, event: dict[str, Any]) -> bool:
        """Apply one Job watch event; True when a Job changed."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            log.info(
                "kubernetes: Job watch ended by the server (%s %s); listing again",
                obj.get("code"),
                obj.get("message", ""),
            )
            self.rv = None  # 410 Gone and friends: start from a fresh list
            return False
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.rv = rv
        info = job_info(obj) if kind != "BOOKMARK" else None
        if info is None:
            return False
        self.events += 1
        if kind != "DELETED":
            self._jobs[info.role] = info
        elif info.role in self._jobs and self._jobs[info.role].name == info.name:
            del self._jobs[info.role]
        self._failures = 0
        self._update(info.role)
        return True

    def _update(self, changed: str | None = None) -> None:
        """Schedule the pod reads the Jobs call for, drop the pods they no longer need,
        and re-judge the cluster (only the ``changed`` role's Job, if its pods stay)."""
        now = time.monotonic()
        pods_before = len(self._pods)
        for role, job in self._jobs.items():
            if job.ready is not None and job.active > job.ready:
                self._pending_due.setdefault(role, now + PENDING_FIRST_READ)
            else:  # every pod that runs is ready: nothing pending to explain
                self._pending_due.pop(role, None)
                self._pending_gap.pop(role, None)
                self._thorough.discard(role)
                self._pods.pop((role, PENDING), None)
            if short_of_pods(job):
                self._refusal_due.setdefault(role, now + PENDING_FIRST_READ)
            else:
                self._refusal_due.pop(role, None)
                self._refusal_gap.pop(role, None)
        refused = self.tracker.interp.refused
        dropped = [r for r in refused if r not in self._refusal_due]
        for role in dropped:  # every pod is there again: the refusal is over
            del refused[role]
        for key in [k for k in self._pods if k[0] not in self._jobs]:
            del self._pods[key]
        if changed is not None and len(self._pods) == pods_before and not dropped:
            self.tracker.set_job(changed, self._jobs.get(changed), time.time())
            return
        pods = [p for group in self._pods.values() for p in group]
        self.tracker.reset(pods, dict(self._jobs), time.time())

    # the pod reads
    def failed_reads(self) -> list[str]:
        """Roles whose Job counts a failure that their last read of failed pods did not see."""
        return [
            r
            for r, job in self._jobs.items()
            if failure_mark(job) != self._failures_read.get(r, failure_mark(None))
        ]

    def pending_reads(self) -> list[tuple[str, int]]:
        """Roles whose pods that are not ready are due to be read (a timeout due counts for
        all), each with how many such pods its Job counts. A read is of one page of the
        role's pending pods; a thorough one (see :meth:`thorough`) looks at the running
        pods as well."""
        now, late = time.monotonic(), self._deadline is not None and time.time() >= self._deadline
        due = [r for r, at in self._pending_due.items() if late or now >= at]
        return [(r, self._jobs[r].active - (self._jobs[r].ready or 0)) for r in due]

    def refusal_reads(self) -> list[tuple[str, str]]:
        """Roles whose Job runs fewer pods than it should and whose Events are due to be
        read for a refusal, each with its Job's name."""
        now = time.monotonic()
        return [(r, self._jobs[r].name) for r, at in self._refusal_due.items() if now >= at]

    def set_refusal(self, role: str, refusal: Refusal | None) -> None:
        """What a read of the role's Job Events found; read again at growing gaps."""
        if role not in self._refusal_due:
            return  # every pod was made by the time the read answered
        gap = self._refusal_gap[role] = min(PENDING_READ_MAX, 2 * self._refusal_gap.get(role, 1.0))
        self._refusal_due[role] = time.monotonic() + gap
        refused = self.tracker.interp.refused
        if refused.get(role) == refusal:
            return
        if refusal is None:
            refused.pop(role, None)
        else:
            refused[role] = refusal
        self.tracker.set_jobs(self.tracker.jobs, time.time())

    def thorough(self, role: str) -> bool:
        """Whether a read of the role's pods that are not ready must list its running pods
        too, if its pending pods do not account for them all: a container can fail to
        start in a running pod (a sidecar in CrashLoopBackOff). Every running pod is a
        costly read, so only when the wait starts on a cluster that has such pods, and
        once they have stayed not ready for a minute."""
        return role in self._thorough or self._pending_gap.get(role, 0.0) >= PENDING_READ_MAX

    def set_pods(self, role: str, phase: str, pods: list[dict[str, Any]], mark: tuple[Any, ...] = ()) -> None:
        """What a read of the role's pods in ``phase`` found (``mark``: the Job's failures
        the read of failed pods answers)."""
        for key in [k for k in self.log_pods if k[0] == role]:
            del self.log_pods[key]  # a retry may have made a newer pod
        if phase == FAILED:
            self._failures_read[role] = mark
        elif role in self._pending_due:
            gap = self._pending_gap[role] = min(PENDING_READ_MAX, 2 * self._pending_gap.get(role, 1.0))
            self._pending_due[role] = time.monotonic() + gap
            self._thorough.discard(role)
        else:
            return  # ready by the time the read answered
        self._pods[(role, phase)] = pods
        self._update()

    def next_due(self) -> float:
        """Seconds until a pod read or a timeout is due (inf: none)."""
        due = [d - time.monotonic() for d in (*self._pending_due.values(), *self._refusal_due.values())]
        if self._deadline is not None:
            due.append(self._deadline - time.time() + 0.5)
        return max(0.0, min(due, default=math.inf))

    def changed_status(self) -> ClusterStatus | None:
        """The status if a task (or the deleted reason) changed since the last one."""
        self.tracker.advance(time.time())
        self._deadline = self.tracker.next_deadline()
        if not self.tracker.changed and self.deleted_reason == self._yielded_reason:
            return None
        status = self.tracker.snapshot()
        self._yielded_reason = self.deleted_reason
        if not status.exists and self.deleted_reason:
            status = dataclasses.replace(status, deleted_reason=self.deleted_reason)
        return status

    def watch_query(self, ref: ClusterRef) -> dict[str, Any]:
        return {"labelSelector": ref.label_selector, "resourceVersion": self.rv, "allowWatchBookmarks": True}

    def watch_seconds(self, left: float) -> int:
        """How long the next watch request may stay open before a read or a timeout is due."""
        wait = max(1, math.ceil(min(left, MAX_WATCH_SECONDS, self.next_due())))
        self._watch_ends = time.monotonic() + wait
        return wait

    def should_reopen(self) -> bool:
        """End the current watch request: something is due before the server would end it."""
        return self.rv is None or time.monotonic() + self.next_due() < self._watch_ends - 0.5

    def stream_failed(self, exc: BaseException) -> float:
        """A watch request broke: list again after the returned delay, or raise."""
        self._failures += 1
        if not is_transient(exc) or self._failures > STREAM_RETRIES:
            reraise("watch jobs", exc)
        log.warning("kubernetes: Job watch failed (%s); listing again", error_message(exc))
        self.rv = None
        return min(2.0**self._failures / 4, 5.0)


def pods_plan(ref: ClusterRef, role: str, phase: str, pages: int) -> Plan:
    """The role's pods in one phase, at most ``pages`` pages of them."""
    query: dict[str, Any] = {
        "labelSelector": f"{ref.label_selector},{naming.LABEL_ROLE}={role}",
        "fieldSelector": f"status.phase={phase}",
        "limit": PENDING_PAGE if pages == 1 else LIST_PAGE,
    }
    items: list[dict[str, Any]] = []
    for _ in range(pages):
        result = yield Request("GET", BY_KIND["Pod"].collection(ref.namespace), query)
        body = (result[1] if result else None) or {}
        items += body.get("items") or []
        more = (body.get("metadata") or {}).get("continue")
        if not more:
            break
        query = {**query, "continue": more}
    return items


# -- the wait's watcher ---------------------------------------------------------------------
class KubernetesWatcher(ClusterWatcher):
    """A wait's reads through one async client: statuses from one pod watch that a task
    reads into a queue while the wait does its other reads; the one-shot reads by plan.

    ``job_cache`` is the backend's: the Jobs listed here serve its later ``status``.
    """

    def __init__(
        self,
        backend: Backend,
        ref: ClusterRef,
        api: AsyncApi,
        interp: Interpreter,
        job_cache: dict[ClusterRef, dict[str, JobInfo]],
    ) -> None:
        super().__init__(backend, ref)
        self.api = api
        self.interp = interp
        self.job_cache = job_cache
        self.session = WatchSession(interp)
        self._statuses: asyncio.Queue[ClusterStatus | Exception] = asyncio.Queue(QUEUED_STATUSES)
        self._reader: asyncio.Task[None] | None = None
        self._getter: asyncio.Future[ClusterStatus | Exception] | None = None

    async def status(self) -> ClusterStatus:
        """The status now, read as the wait reads it (a sensor's poke): the Jobs, and the
        pods they call for (a fresh session: a wait that starts on what it finds)."""
        session = WatchSession(self.interp)
        items, rv = await arun(self.api, list_plan(self.ref, "Job"))
        session.set_jobs(jobs_of(items), rv)
        await self._read_pods(session)
        status = session.tracker.status(time.time())
        if not status.exists and await arun(self.api, jobset_exists_plan(self.ref)):
            return dataclasses.replace(status, exists=True)  # its JobSet is making its Jobs
        if not status.exists:
            reason = await arun(self.api, deleted_reason_plan(self.ref))
            status = dataclasses.replace(status, deleted_reason=reason)
        return status

    async def next(self, timeout: float) -> ClusterStatus | None:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name=f"watch of cluster {self.ref.name}")
        # The get outlives a timeout (it is awaited again next time): cancelling it could
        # drop a status it had just taken.
        if self._getter is None:
            self._getter = asyncio.ensure_future(self._statuses.get())
        done, _ = await asyncio.wait({self._getter}, timeout=timeout)
        if not done:
            return None
        item, self._getter = self._getter.result(), None
        if isinstance(item, Exception):
            raise item
        return item

    async def logs(self, role: str, index: int, tail_lines: int | None = None) -> str:
        text: str = await arun(
            self.api, pod_log_plan(self.ref, role, index, {"tailLines": tail_lines}, self.session)
        )
        return text

    async def task_activity(self, role: str, index: int) -> Activity:
        """When the task's container last wrote a line (the kubelet's timestamp)."""
        line = await arun(self.api, pod_log_plan(self.ref, role, index, ACTIVITY_LOG, self.session))
        return Activity(last_output=log_line_time(line))

    async def queue_message(self) -> str | None:
        message: str | None = await arun(self.api, queue_plan(self.ref))
        return message

    async def aclose(self) -> None:
        for task in (self._getter, self._reader):
            if task is not None:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):
                    pass
        self._getter = self._reader = None

    # the watch, until the wait ends
    async def _read(self) -> None:
        try:
            while True:
                if self.session.rv is None:
                    items, rv = await arun(self.api, list_plan(self.ref, "Job"))
                    self.session.set_jobs(jobs_of(items), rv)
                await self._emit()
                await self._watch()
        except Exception as exc:  # the wait raises it
            await self._statuses.put(exc)

    async def _watch(self) -> None:
        """One watch request, until the server ends it or something is due first; after
        a broken one, a pause before the list that starts the next."""
        session = self.session
        path = BY_KIND["Job"].collection(self.ref.namespace)
        seconds = session.watch_seconds(MAX_WATCH_SECONDS)
        delay = 0.0
        async with aclosing(self.api.watch(path, session.watch_query(self.ref), seconds)) as events:
            while True:
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    delay = session.stream_failed(exc)
                    break
                if session.on_event(event):
                    await self._emit()
                if session.should_reopen():
                    break
        if delay:
            await asyncio.sleep(delay)

    async def _read_pods(self, session: WatchSession) -> None:
        """The pod reads that are due, before the status they explain."""
        for role in session.failed_reads():
            mark = failure_mark((session.jobs or {}).get(role))
            pods = await arun(self.api, pods_plan(self.ref, role, FAILED, pages=MANY_PAGES))
            session.set_pods(role, FAILED, pods, mark)
        for role, not_ready in session.pending_reads():
            pods = await arun(self.api, pods_plan(self.ref, role, PENDING, pages=1))
            if len(pods) < min(not_ready, PENDING_PAGE) and session.thorough(role):
                running = await arun(self.api, pods_plan(self.ref, role, RUNNING, pages=MANY_PAGES))
                pods += [p for p in running if not is_ready(p)]
            session.set_pods(role, PENDING, pods)
        for role, job in session.refusal_reads():
            session.set_refusal(role, await arun(self.api, refusal_plan(self.ref, job, time.time())))

    async def _emit(self) -> None:
        session = self.session
        await self._read_pods(session)
        if not session.tracker.exists and session.deleted_reason is None:
            if await arun(self.api, jobset_exists_plan(self.ref)):
                return  # not gone: its JobSet is making its Jobs, which the watch will see
            session.deleted_reason = await arun(self.api, deleted_reason_plan(self.ref))
        self.job_cache[self.ref] = dict(session.jobs or {})
        status = session.changed_status()
        if status is not None:
            await self._statuses.put(status)
