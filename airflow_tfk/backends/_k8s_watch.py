"""What a wait reads from Kubernetes: one pod watch for the whole wait, the status, a
task's log, Kueue's reason.

:class:`KubernetesWatcher` lists the Jobs and the pods once, then keeps a single pod watch
on the cluster's label selector open for as long as the wait lasts, re-opening it from
its resourceVersion only when a timeout is due, the Jobs must be listed again, or the
server ends it (a 410 lists again). Each event updates the :class:`ClusterTracker` in O(1)
of the cluster's size; a status is queued for the wait only when a task changed. The
one-shot reads are request plans (:mod:`._k8s_plan`) that the backend's blocking
``status``/``logs`` run with the sync client and the watcher with the async one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from contextlib import aclosing
from typing import Any

from airflow_tfk import naming
from airflow_tfk.backends._k8s_cluster import ClusterTracker, Interpreter
from airflow_tfk.backends._k8s_plan import Plan, Request, arun, list_plan, reraise
from airflow_tfk.backends._k8s_status import (
    LABEL_COMPLETION_INDEX,
    JobInfo,
    is_job_pod,
    job_info,
    log_line_time,
    newest_pod,
    task_key,
)
from airflow_tfk.backends.base import Backend, ClusterRef, ClusterWatcher
from airflow_tfk.kube.api import BY_KIND, AsyncApi, Kind, error_message
from airflow_tfk.kube.retry import is_transient
from airflow_tfk.naming import LABEL_PREFIX
from airflow_tfk.status import Activity, ClusterStatus

log = logging.getLogger(__name__)

# A Job task vanished: look at the Jobs again, but not more often than this.
JOB_REFRESH_INTERVAL = 2.0
# A Job can change with no pod event (deleted or failed while queued, with no pod): the
# Jobs (a few objects, not the pods) are listed again this often, and sooner while the
# cluster has no pod at all. With pods, a Job's end or deletion also ends or deletes its
# pods, which the watch sees: the relist is a backstop, and each one also re-opens the
# pod watch, so it sets what a waiting training costs the API server while nothing moves.
JOB_RELIST_SECONDS = 240.0
JOB_RELIST_PODLESS_SECONDS = 10.0
MAX_WATCH_SECONDS = 300
STREAM_RETRIES = 5
LABEL_DELETED_CLUSTER = f"{LABEL_PREFIX}/deleted-cluster"
# Statuses the watch may run ahead of the wait before it stops reading the stream.
QUEUED_STATUSES = 256


def jobs_of(items: list[dict[str, Any]]) -> dict[str, JobInfo]:
    """The cluster's Jobs by role."""
    out = {}
    for job in items:
        info = job_info(job)
        if info is not None:
            out[info.role] = info
    return out


def deleted_reason_plan(ref: ClusterRef) -> Plan:
    """The message of the newest ``TFClusterDeleted`` Event of the cluster, or ""."""
    result = yield Request(
        "GET",
        BY_KIND["Event"].collection(ref.namespace),
        {"labelSelector": f"{LABEL_DELETED_CLUSTER}={ref.name}"},
        optional=True,
    )
    events = (result[1] or {}).get("items") or [] if result else []
    if not events:
        return ""
    newest = max(events, key=lambda e: (e.get("lastTimestamp") or "", e["metadata"].get("name", "")))
    return str(newest.get("message") or "")


def jobset_exists_plan(ref: ClusterRef) -> Plan:
    """Whether the cluster has a JobSet (``layout: jobset``). Its Jobs can be missing while
    it exists: the JobSet controller makes them after the JobSet, and with the real Kueue
    and JobSet controllers a queued JobSet was seen without Jobs for a moment well after
    its create. That is no reason to call the cluster deleted. Without the JobSet API
    (404) there is none."""
    result = yield Request(
        "GET",
        BY_KIND["JobSet"].collection(ref.namespace),
        {"labelSelector": ref.label_selector},
        optional=True,
    )
    body = (result[1] if result else None) or {}
    return bool(body.get("items"))


class WatchSession:
    """State of one watch: the tracked pods, the Jobs, the resourceVersion. No I/O."""

    def __init__(self, interp: Interpreter) -> None:
        self.tracker = ClusterTracker(interp)
        self.rv: str | None = None
        self.events = 0  # pod events applied (the bench prints events/s)
        self._jobs_due = True
        self._jobs_listed_at = -math.inf
        self._deadline: float | None = None  # wall clock: a timeout may flip a task
        self._failures = 0
        self._opened_with: tuple[bool, float | None] = (False, None)
        self._yielded_reason: str | None = None
        self.deleted_reason: str | None = None  # looked up once the cluster is gone

    @property
    def jobs(self) -> dict[str, JobInfo] | None:
        return self.tracker.jobs

    # jobs
    def needs_jobs(self) -> bool:
        return time.monotonic() >= self._jobs_listed_at + self._jobs_every()

    def _jobs_every(self) -> float:
        if self._jobs_due:
            return JOB_REFRESH_INTERVAL
        return JOB_RELIST_SECONDS if self.tracker.has_pods else JOB_RELIST_PODLESS_SECONDS

    def jobs_missing(self) -> None:
        """No pod and no Job, but the cluster is there (its JobSet): list the Jobs again."""
        self._jobs_due = True

    def set_jobs(self, jobs: dict[str, JobInfo]) -> None:
        self.tracker.set_jobs(jobs, time.time())
        self._jobs_due = False
        self._jobs_listed_at = time.monotonic()

    # pods
    def reset(self, pods: list[dict[str, Any]], rv: str | None) -> None:
        self.tracker.reset(pods, self.tracker.jobs, time.time())
        self.rv = rv or "0"

    def on_event(self, event: dict[str, Any]) -> bool:
        """Apply one watch event; True when the pods changed."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            log.info(
                "kubernetes: pod watch ended by the server (%s %s); listing again",
                obj.get("code"),
                obj.get("message", ""),
            )
            self.rv = None  # 410 Gone and friends: start from a fresh list
            return False
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.rv = rv
        if kind == "BOOKMARK":
            return False
        self.events += 1
        key = task_key(obj)
        if kind == "DELETED":
            self.tracker.remove(obj, time.time())
            if key and is_job_pod(obj) and not self.tracker.pods_of(key):
                self._jobs_due = True  # did the Job fail, finish or go away?
        else:
            self.tracker.upsert(obj, time.time())
            jobs = self.tracker.jobs
            if key and jobs is not None and key[0] not in jobs and is_job_pod(obj):
                self._jobs_due = True  # a Job created after the session began
        self._failures = 0
        return True

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
        """How long the next watch request may stay open before something is due."""
        self._opened_with = (self._jobs_due, self._deadline)
        wait = min(left, MAX_WATCH_SECONDS)
        if self._deadline is not None:
            wait = min(wait, max(0.0, self._deadline - time.time()) + 0.5)
        wait = min(wait, max(0.0, self._jobs_listed_at + self._jobs_every() - time.monotonic()))
        return max(1, math.ceil(wait))

    def should_reopen(self) -> bool:
        """End the current watch request: something is due before the server would end it."""
        if self.rv is None or self.needs_jobs():
            return True
        jobs_due, deadline = self._opened_with
        if self._jobs_due and not jobs_due:
            return True  # reopen with a timeout that ends when the Job list is due
        if self._deadline is not None and (deadline is None or self._deadline < deadline):
            return True  # a new, earlier timeout appeared
        return self._deadline is not None and time.time() >= self._deadline

    def stream_failed(self, exc: BaseException) -> float:
        """A watch request broke: list again after the returned delay, or raise."""
        self._failures += 1
        if not is_transient(exc) or self._failures > STREAM_RETRIES:
            reraise("watch pods", exc)
        log.warning("kubernetes: pod watch failed (%s); listing again", error_message(exc))
        self.rv = None
        return min(2.0**self._failures / 4, 5.0)


# -- one-shot reads, for both clients ----------------------------------------------------------
def status_plan(
    ref: ClusterRef, interp: Interpreter, job_cache: dict[ClusterRef, dict[str, JobInfo]]
) -> Plan:
    """One pod list; the Jobs (retry settings) are listed once and when a Job task vanished."""
    pods, _ = yield from list_plan(ref, "Pod")
    jobs = job_cache.get(ref)
    if jobs is None or jobs_stale(interp, pods, jobs):
        items, _ = yield from list_plan(ref, "Job")
        jobs = job_cache[ref] = jobs_of(items)
    status, _ = interp.status(pods, jobs, time.time())
    if not status.exists and (yield from jobset_exists_plan(ref)):
        job_cache.pop(ref, None)  # its JobSet is (re)making the Jobs: list them next time
        return dataclasses.replace(status, exists=True)
    if not status.exists:
        reason = yield from deleted_reason_plan(ref)
        status = dataclasses.replace(status, deleted_reason=reason)
    return status


def jobs_stale(interp: Interpreter, pods: list[dict[str, Any]], jobs: dict[str, JobInfo]) -> bool:
    """Do the cached Jobs still explain these pods? (Spec fields are immutable; only
    outcomes change, and a Job's outcome shows as its pods going away.)"""
    if not pods:
        return True
    present = {task_key(p) for p in pods}
    for key, is_job in interp.known.items():
        if is_job and key not in present and key[0] not in interp.ignored_roles:
            return True
    return any(is_job_pod(p) and (task_key(p) or ("", 0))[0] not in jobs for p in pods)


def pod_log_plan(
    ref: ClusterRef, role: str, index: int, params: dict[str, Any], seen: WatchSession | None = None
) -> Plan:
    """The log of a task's newest pod ("" when it has none yet). The pod comes from the
    watch ``seen`` when one is current, else from a list of the task's pods only."""
    selector = f"{ref.label_selector},{naming.LABEL_ROLE}={role}"
    pod = None
    if seen is not None and seen.rv is not None:
        pod = newest_pod(seen.tracker.pods_of((role, index)))
    if pod is None:
        # List the task's pods only, not the role's (600 workers: a few MB per read);
        # the index label is set by the Job controller (>= 1.28).
        pods, _ = yield from list_plan(ref, "Pod", f"{selector},{LABEL_COMPLETION_INDEX}={index}")
        pod = newest_pod(p for p in pods if task_key(p) == (role, index))
    if pod is None:  # an older controller without the label, or an earlier PS StatefulSet
        pods, _ = yield from list_plan(ref, "Pod", selector)
        pod = newest_pod(p for p in pods if task_key(p) == (role, index))
    if pod is None:
        return ""
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    container = "tensorflow" if "tensorflow" in containers else (containers[0] if containers else None)
    path = BY_KIND["Pod"].item(ref.namespace, pod["metadata"]["name"]) + "/log"
    # 400: the container has not started yet; 404: the pod just went away.
    result = yield Request(
        "GET", path, {"container": container, **params}, text=True, what=f"logs of {role}-{index}"
    )
    return str(result[1]) if result else ""


ACTIVITY_LOG = {"tailLines": 1, "timestamps": "true"}


def queue_plan(ref: ClusterRef) -> Plan:
    """Kueue's pending reason for the cluster's Workloads; None when nothing waits or
    Kueue is not installed (its API answers 404)."""
    from airflow_tfk.backends._kueue import WORKLOAD_API_VERSIONS, queue_message

    for version in WORKLOAD_API_VERSIONS:
        kind = Kind("Workload", version, "workloads")
        result = yield Request("GET", kind.collection(ref.namespace), optional=True)
        if result is not None:
            return queue_message((result[1] or {}).get("items") or [], ref.name)
    return None


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
        status: ClusterStatus = await arun(self.api, status_plan(self.ref, self.interp, self.job_cache))
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
                await self._list()
                await self._emit()
                await self._watch()
        except Exception as exc:  # the wait raises it
            await self._statuses.put(exc)

    async def _list(self) -> None:
        session = self.session
        if session.needs_jobs():
            items, _ = await arun(self.api, list_plan(self.ref, "Job"))
            session.set_jobs(jobs_of(items))
            self.job_cache[self.ref] = session.jobs or {}
        if session.rv is None:
            pods, rv = await arun(self.api, list_plan(self.ref, "Pod"))
            session.reset(pods, rv)

    async def _watch(self) -> None:
        """One watch request, until the server ends it or something is due first; after
        a broken one, a pause before the list that starts the next."""
        session = self.session
        path = BY_KIND["Pod"].collection(self.ref.namespace)
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

    async def _emit(self) -> None:
        session = self.session
        if not session.tracker.exists and session.deleted_reason is None:
            if await arun(self.api, jobset_exists_plan(self.ref)):
                session.jobs_missing()  # not gone: its Jobs are being made; nothing to say yet
                return
            session.deleted_reason = await arun(self.api, deleted_reason_plan(self.ref))
        status = session.changed_status()
        if status is not None:
            await self._statuses.put(status)
