"""The Kubernetes watch of one cluster, written once: :func:`watch_plan` drives both
``KubernetesBackend.watch`` and ``awatch`` (see :mod:`._k8s_plan`).

One Job list and one pod list per session, then a single pod watch on the cluster's
label selector, re-opened only when a timeout is due, the Jobs must be listed again, or
the server ends it. Each event updates the :class:`ClusterTracker` in O(1) of the
cluster's size; a status is yielded only when a task changed.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Any

from airflow_tfk.backends._k8s_cluster import ClusterTracker, Interpreter
from airflow_tfk.backends._k8s_plan import (
    CLOSE_WATCH,
    NEXT_EVENT,
    WATCH_ENDED,
    OpenWatch,
    Plan,
    Request,
    Sleep,
    StreamFailed,
    WatchPlan,
    list_plan,
    reraise,
)
from airflow_tfk.backends._k8s_status import JobInfo, is_job_pod, job_info, task_key
from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.kube.api import BY_KIND, error_message
from airflow_tfk.kube.retry import is_transient
from airflow_tfk.naming import LABEL_PREFIX
from airflow_tfk.status import ClusterStatus

log = logging.getLogger(__name__)

# A Job task vanished: look at the Jobs again, but not more often than this.
JOB_REFRESH_INTERVAL = 2.0
MAX_WATCH_SECONDS = 300
STREAM_RETRIES = 5
LABEL_DELETED_CLUSTER = f"{LABEL_PREFIX}/deleted-cluster"


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
        return self._jobs_due and time.monotonic() - self._jobs_listed_at >= JOB_REFRESH_INTERVAL

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
        if self._jobs_due:
            wait = min(wait, max(0.0, self._jobs_listed_at + JOB_REFRESH_INTERVAL - time.monotonic()))
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


def watch_plan(
    ref: ClusterRef,
    session: WatchSession,
    timeout: float,
    job_cache: dict[ClusterRef, dict[str, JobInfo]],
) -> WatchPlan:
    """Yield the status on every change, from one pod watch, for ``timeout`` seconds.

    ``job_cache`` is the backend's: the Jobs listed here serve its later ``status``.
    """
    end = time.monotonic() + timeout
    while True:
        if session.needs_jobs():
            items, _ = yield from list_plan(ref, "Job")
            session.set_jobs(jobs_of(items))
            job_cache[ref] = session.jobs or {}
        if session.rv is None:
            pods, rv = yield from list_plan(ref, "Pod")
            session.reset(pods, rv)
        yield from _emit(ref, session)
        left = end - time.monotonic()
        if left <= 0:
            return
        yield OpenWatch(
            BY_KIND["Pod"].collection(ref.namespace), session.watch_query(ref), session.watch_seconds(left)
        )
        delay = 0.0
        while True:
            event = yield NEXT_EVENT
            if event == WATCH_ENDED:
                break
            if isinstance(event, StreamFailed):
                delay = session.stream_failed(event.error)
                break
            if session.on_event(event):
                yield from _emit(ref, session)
            if time.monotonic() >= end or session.should_reopen():
                break
        yield CLOSE_WATCH
        if delay:
            yield Sleep(delay)


def _emit(ref: ClusterRef, session: WatchSession) -> WatchPlan:
    if not session.tracker.exists and session.deleted_reason is None:
        if (yield from jobset_exists_plan(ref)):
            session.jobs_missing()  # not gone: its Jobs are being made; nothing to say yet
            return
        session.deleted_reason = yield from deleted_reason_plan(ref)
    status = session.changed_status()
    if status is not None:
        yield status
