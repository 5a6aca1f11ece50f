"""Pods and Jobs (plain API JSON) -> the cluster's :class:`ClusterStatus`. Pure: no I/O.

Rules (see docs/architecture.md, "Status model"): a task is ``(role, index)``; its newest
pod decides its phase (:func:`._k8s_status.pod_verdict`). A failed pod whose Job index
still has retries left is not failed (the Job controller replaces it); ``Phase.FAILED``
means failed for good. A Job index without pods is pending, completed or failed by the
Job's status; a task seen before whose pods and Job are gone is reported ``Deleted``.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.backends.kubernetes.refusal import Refusal
from airflow_tfk.backends.kubernetes.status import (
    ANN_INDEX_FAILURES,
    JobInfo,
    _sort_key,
    _statuses,
    failure_action,
    is_job_pod,
    pod_id,
    pod_verdict,
    slim_pod,
    task_key,
)
from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus

TaskKey = tuple[str, int]


@dataclass
class Interpreter:
    """How one cluster's pods (+ the Jobs, when known) become task statuses; what it
    remembers across watches of that cluster.

    ``known`` remembers tasks seen before, so a task whose pods and Job are gone is
    reported ``Deleted`` instead of silently vanishing. ``ignored_roles`` are roles
    deleted on purpose (``delete_roles``): not reported at all.
    """

    unschedulable_timeout: float
    image_pull_timeout: float
    known: dict[TaskKey, bool] = field(default_factory=dict)  # key -> is a Job task
    ignored_roles: set[str] = field(default_factory=set)
    # role -> why the API server refuses the pods its Job tries to create
    refused: dict[str, Refusal] = field(default_factory=dict)

    def status(
        self, pods: Iterable[dict[str, Any]], jobs: dict[str, JobInfo] | None, now: float
    ) -> tuple[ClusterStatus, float | None]:
        """The status of a pod list, and the earliest time a timeout could change it."""
        tracker = ClusterTracker(self)
        tracker.reset(pods, jobs)
        return tracker.status(now), tracker.next_deadline()

    def _podless(self, job: JobInfo, index: int, now: float = 0.0) -> tuple[TaskStatus, float | None]:
        """An index without a pod read, by its Job's word (and the deadline of a refusal)."""
        if index in job.completed_indexes or (job.complete and not job.failed):
            return TaskStatus(job.role, index, Phase.SUCCEEDED, "Completed", exit_code=0), None
        if job.failed:
            return TaskStatus(job.role, index, Phase.FAILED, job.failed[0], job.failed[1]), None
        if index in job.failed_indexes:
            message = f"index {index} of Job {job.name} failed"
            return TaskStatus(job.role, index, Phase.FAILED, "FailedIndex", message), None
        refusal = self.refused.get(job.role)
        if refusal is not None:
            # a quota may free up, as a node may: it waits as long as an unschedulable pod
            deadline = refusal.since + self.unschedulable_timeout
            if refusal.permanent or self.unschedulable_timeout <= 0 or (now or time.time()) >= deadline:
                return TaskStatus(job.role, index, Phase.FAILED, refusal.reason, refusal.message), None
            return TaskStatus(job.role, index, Phase.PENDING, refusal.reason, refusal.message), deadline
        return TaskStatus(job.role, index, Phase.PENDING), None

    def _task(
        self, key: tuple[str, int], pods: list[dict[str, Any]], job: JobInfo | None, now: float
    ) -> tuple[TaskStatus, float | None]:
        role, index = key
        newest = pods[-1]
        v = pod_verdict(
            newest,
            now,
            unschedulable_timeout=self.unschedulable_timeout,
            image_pull_timeout=self.image_pull_timeout,
        )
        is_job = job is not None or is_job_pod(newest)
        if not is_job:
            restarts = sum(int(cs.get("restartCount") or 0) for cs in _statuses(newest))
            return TaskStatus(role, index, v.phase, v.reason, v.message, v.exit_code, restarts), v.deadline
        counted = 0
        for pod in pods:
            if (pod.get("status") or {}).get("phase") == "Failed" and failure_action(job, pod) not in (
                "Ignore",
            ):
                counted += 1
        annotated = (newest.get("metadata") or {}).get("annotations") or {}
        try:
            counted = max(
                counted,
                int(annotated.get(ANN_INDEX_FAILURES, "0"))
                # the newest pod's own failure, unless the policy ignores it (a disruption)
                + (
                    1
                    if v.phase is Phase.FAILED and v.terminal and failure_action(job, newest) != "Ignore"
                    else 0
                ),
            )
        except ValueError:
            pass
        if job is not None and v.phase is not Phase.SUCCEEDED:
            if job.failed:
                reason, message = job.failed
                if v.phase is Phase.FAILED:  # the pod's own reason says more
                    reason, message = v.reason, v.message or message
                return TaskStatus(role, index, Phase.FAILED, reason, message, v.exit_code, counted), None
            if index in job.failed_indexes and v.phase is Phase.FAILED:
                return TaskStatus(role, index, Phase.FAILED, v.reason, v.message, v.exit_code, counted), None
        if v.phase is Phase.FAILED and v.terminal:
            action = failure_action(job, newest)
            if action == "Ignore" or (action == "Count" and counted <= self._retries(job, pods)):
                limit = self._retries(job, pods)
                limit_text = "" if math.isinf(limit) else f" of {int(limit)}"
                message = f"{v.reason}"
                if v.exit_code is not None:
                    message += f" (exit code {v.exit_code})"
                message += (
                    f"; retry {counted}{limit_text}" if action == "Count" else "; not counted against retries"
                )
                return TaskStatus(role, index, Phase.PENDING, "Retrying", message, v.exit_code, counted), None
        return TaskStatus(role, index, v.phase, v.reason, v.message, v.exit_code, counted), v.deadline

    @staticmethod
    def _retries(job: JobInfo | None, pods: list[dict[str, Any]]) -> float:
        if job is None:
            return 0  # unknown Job: do not hope for a retry that may never come
        if job.backoff_limit_per_index is not None:
            return job.backoff_limit_per_index
        # Job-wide backoffLimit counts failures of all indexes together; judging by this
        # index alone can only be late, never early, and the Job's Failed condition ends it.
        return job.backoff_limit


_ROLE_ORDER = {"chief": 0, "ps": 1, "worker": 2, "evaluator": 3}


def _report_order(key: TaskKey) -> tuple[int, str, int]:
    return _ROLE_ORDER.get(key[0], 9), key[0], key[1]


class ClusterTracker:
    """A cluster's status kept current event by event.

    Why incremental: 600 workers finishing are ~1,800 pod events. A pod event
    re-interprets its own task only, and the per-role counts and the failed tasks that
    the success policies read are maintained alongside, so no step walks every task
    (the watch used to rebuild, compare and evaluate the whole status per event, which
    fell minutes behind on a busy machine). A change of the Jobs, of the roles deleted
    on purpose, or of whether anything exists at all re-interprets everything; those are
    rare. The rules are :class:`Interpreter`'s (the one-list ``status`` runs them
    through a fresh tracker), so the watch and a single list cannot disagree.
    """

    def __init__(self, interp: Interpreter, partial: bool = False) -> None:
        self.interp = interp
        # partial: the pods are only those a wait read for trouble (pending or failed); a
        # Job's other unfinished indexes run or wait as its ready count says.
        self.partial = partial
        self._running: set[TaskKey] = set()
        self.jobs: dict[str, JobInfo] | None = None
        self._pods: dict[str, tuple[TaskKey | None, dict[str, Any]]] = {}  # uid -> (task, pod)
        self._groups: dict[TaskKey, dict[str, dict[str, Any]]] = {}  # task -> uid -> pod
        self._tasks: dict[TaskKey, TaskStatus] = {}
        self._keys: list[TaskKey] = []  # the tasks in report order
        self._counts: dict[tuple[str, Phase], int] = {}
        self._failed: dict[TaskKey, TaskStatus] = {}
        self._deadlines: dict[TaskKey, float] = {}
        self._heap: list[tuple[float, TaskKey]] = []
        self._ignored: frozenset[str] = frozenset()
        self._exists = False
        self.changed = True  # since the last status() handed out

    # -- what the watch feeds in ---------------------------------------------------------
    def reset(
        self, pods: Iterable[dict[str, Any]], jobs: dict[str, JobInfo] | None, now: float = 0.0
    ) -> None:
        """Start over from a full pod list (and the Jobs)."""
        self._pods.clear()
        self._groups.clear()
        for pod in pods:
            self._store(pod)
        self.jobs = jobs
        self._rebuild(now or time.time())

    def set_jobs(self, jobs: dict[str, JobInfo] | None, now: float = 0.0) -> None:
        self.jobs = jobs
        self._rebuild(now or time.time())

    def set_job(self, role: str, job: JobInfo | None, now: float) -> None:
        """One Job changed (None: deleted). Only the indexes whose word changed are judged
        again: a 2,000-worker Job changes hundreds of times while it runs."""
        old = (self.jobs or {}).get(role)
        jobs = dict(self.jobs or {})
        if job is None:
            jobs.pop(role, None)
        else:
            jobs[role] = job
        self.jobs = jobs
        exists = bool(self._pods) or bool(jobs)
        if old is None or job is None or old.failed != job.failed or old.completions != job.completions:
            self._rebuild(now)
            return
        if exists != self._exists:
            self._rebuild(now)
            return
        running = {k for k in self._running if k[0] == role}
        now_running = set(self._ready_untracked(job)) if self.partial else set()
        self._running = (self._running - running) | now_running
        indexes = (old.completed_indexes ^ job.completed_indexes) | (old.failed_indexes ^ job.failed_indexes)
        keys = {(role, i) for i in indexes} | (running ^ now_running)
        for key in sorted(keys):
            self._refresh(key, now)

    def upsert(self, pod: dict[str, Any], now: float) -> None:
        """A pod was added or modified."""
        old = self._pods.get(pod_id(pod))
        key = self._store(pod)
        if old is not None and old[0] is not None and old[0] != key:
            self._refresh(old[0], now)
        if not self._exists:
            self._rebuild(now)
        elif key is not None:
            self._refresh(key, now)

    def remove(self, pod: dict[str, Any], now: float) -> None:
        """A pod was deleted."""
        entry = self._pods.pop(pod_id(pod), None)
        if entry is None:
            return
        key = entry[0]
        if key is not None:
            group = self._groups.get(key)
            if group is not None:
                group.pop(pod_id(pod), None)
                if not group:
                    del self._groups[key]
        if not (self._pods or self.jobs):
            self._rebuild(now)  # nothing left: every known task is gone
        elif key is not None:
            self._refresh(key, now)

    # -- what the watch reads ------------------------------------------------------------
    @property
    def pods(self) -> dict[str, dict[str, Any]]:
        return {uid: pod for uid, (_, pod) in self._pods.items()}

    def pods_of(self, key: TaskKey) -> list[dict[str, Any]]:
        return list((self._groups.get(key) or {}).values())

    @property
    def has_pods(self) -> bool:
        return bool(self._pods)

    @property
    def exists(self) -> bool:
        return self._exists

    def status(self, now: float) -> ClusterStatus:
        """The current status; timeouts due by ``now`` are applied first."""
        self.advance(now)
        return self.snapshot()

    def advance(self, now: float) -> None:
        """Apply the timeouts due by ``now`` (and a change of the roles deleted on purpose)."""
        if self._ignored != self.interp.ignored_roles:
            self._rebuild(now)
        while self._heap and self._heap[0][0] <= now:
            deadline, key = heapq.heappop(self._heap)
            if self._deadlines.get(key) == deadline:
                del self._deadlines[key]
                self._refresh(key, now)

    def snapshot(self) -> ClusterStatus:
        """The status as it stands (an immutable copy); clears :attr:`changed`."""
        self.changed = False
        return ClusterStatus(
            tuple(map(self._tasks.__getitem__, self._keys)),
            exists=self._exists,
            _counts=dict(self._counts),
            _failed=tuple(self._failed.values()),
        )

    def next_deadline(self) -> float | None:
        """The earliest time a timeout could change a task (or None)."""
        while self._heap and self._deadlines.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    # -- inside ----------------------------------------------------------------------------
    def _store(self, pod: dict[str, Any]) -> TaskKey | None:
        pod = slim_pod(pod)
        uid = pod_id(pod)
        old = self._pods.get(uid)
        if old is not None and old[0] is not None:
            group = self._groups.get(old[0])
            if group is not None:
                group.pop(uid, None)
                if not group:
                    del self._groups[old[0]]
        key = task_key(pod)
        self._pods[uid] = (key, pod)
        if key is not None:
            self._groups.setdefault(key, {})[uid] = pod
        return key

    def _value(self, key: TaskKey, now: float) -> tuple[TaskStatus | None, float | None]:
        """One task by the rules of the module docstring; None when it is not reported."""
        role, index = key
        if role in self._ignored:
            return None, None
        job = (self.jobs or {}).get(role)
        group = self._groups.get(key)
        if job is not None and index in job.completed_indexes:
            group = None  # the Job's word: the index is done, whatever older pods said
        if group:
            pods = sorted(group.values(), key=_sort_key)
            self.interp.known[key] = job is not None or any(is_job_pod(p) for p in pods)
            task, deadline = self.interp._task(key, pods, job, now)
            if self.partial and key in self._running and task.phase is Phase.PENDING:
                # only finished pods were read, and the Job counts a ready pod for the
                # index: its replacement runs (the retry count stays the read pods')
                task = TaskStatus(role, index, Phase.RUNNING, restarts=task.restarts)
            return task, deadline
        if job is not None and index < job.completions:
            task, deadline = self.interp._podless(job, index, now)
            if self.partial:
                self.interp.known[key] = True
                if key in self._running:
                    return TaskStatus(role, index, Phase.RUNNING), None
            return task, deadline
        is_job = self.interp.known.get(key)
        if not self._exists or is_job is None:
            return None, None
        if self.jobs is not None and role not in self.jobs:
            message = f"the {role} Job was deleted while the task ran"
            return TaskStatus(role, index, Phase.FAILED, "Deleted", message), None
        return None, None

    def _ready_untracked(self, job: JobInfo) -> list[TaskKey]:
        """The unfinished indexes that a partial tracker counts as running: as many as the
        Job has ready pods, of those with no unfinished pod read (a read pod that has not
        finished says for itself). Which
        ones is known only for the pods read; the rest are taken in index order."""
        if job.failed:
            return []
        done = job.completed_indexes | job.failed_indexes
        ready = job.active if job.ready is None else job.ready
        keys = [(job.role, i) for i in range(job.completions) if i not in done]
        # indexes with no pod read first: one that just failed is the last to be ready again
        fresh = [k for k in keys if k not in self._groups]
        retried = [k for k in keys if k in self._groups and not self._has_live_pod(k)]
        return (fresh + retried)[:ready]

    def _has_live_pod(self, key: TaskKey) -> bool:
        """Whether a pod read for the task is still unfinished. A retried index keeps the
        failed pod read for its reason, but that pod no longer says what the index does:
        the replacement, never read while it is ready, is one of the Job's ready pods."""
        group = self._groups.get(key) or {}
        return any(
            (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed") for p in group.values()
        )

    def _refresh(self, key: TaskKey, now: float) -> None:
        task, deadline = self._value(key, now)
        if deadline is None:
            self._deadlines.pop(key, None)
        elif self._deadlines.get(key) != deadline:
            self._deadlines[key] = deadline
            heapq.heappush(self._heap, (deadline, key))
        old = self._tasks.get(key)
        if task == old:
            return
        self.changed = True
        if old is not None:
            self._counts[(old.role, old.phase)] -= 1
            self._failed.pop(key, None)
        if task is None:
            del self._tasks[key]
            self._keys.remove(key)
            return
        if old is None:
            bisect.insort(self._keys, key, key=_report_order)
        self._tasks[key] = task
        count_key = (task.role, task.phase)
        self._counts[count_key] = self._counts.get(count_key, 0) + 1
        if task.phase is Phase.FAILED:
            self._failed[key] = task

    def _rebuild(self, now: float) -> None:
        """Re-interpret every task (Jobs, deleted roles or existence changed)."""
        before = (dict(self._tasks), self._exists)
        was_changed = self.changed
        self._ignored = frozenset(self.interp.ignored_roles)
        self._exists = bool(self._pods) or bool(self.jobs)
        self._tasks.clear()
        self._keys.clear()
        self._counts.clear()
        self._failed.clear()
        self._deadlines.clear()
        self._heap.clear()
        keys = set(self._groups)
        self._running.clear()
        for job in (self.jobs or {}).values():
            keys.update((job.role, i) for i in range(job.completions))
            if self.partial:
                self._running.update(self._ready_untracked(job))
        keys.update(self.interp.known)
        # in (role, index) order: tasks that fail together are reported in the same order
        # in every process (a set of str keys iterates in a per-process hash order)
        for key in sorted(keys):
            self._refresh(key, now)
        self.changed = was_changed or (dict(self._tasks), self._exists) != before
