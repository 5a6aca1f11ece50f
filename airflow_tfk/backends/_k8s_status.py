"""Pods and Jobs (plain API JSON) -> the shared status model. Pure: no I/O.

Why here and not in the watch loop: the same interpretation serves ``status`` (one list),
``watch`` and ``awatch`` (one pod watch), and is unit-testable on hand-written JSON.

Rules (see docs/architecture.md, "Status model"): a task is ``(role, index)``; its newest
pod decides its phase. A failed pod whose Job index still has retries left is not failed
(the Job controller replaces it); ``Phase.FAILED`` means failed for good.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_tfk import naming
from airflow_tfk.status import ClusterStatus, Phase, TaskStatus

ANN_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
ANN_INDEX_FAILURES = "batch.kubernetes.io/job-index-failure-count"
ANN_INDEX_IGNORED = "batch.kubernetes.io/job-index-ignored-failure-count"
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# Waiting reasons that never resolve on their own: fail at once.
FATAL_WAITING = frozenset(
    {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError", "CrashLoopBackOff"}
)
# Waiting reasons that may be transient (registry hiccup): fail after image_pull_timeout.
IMAGE_PULL_WAITING = frozenset({"ImagePullBackOff", "ErrImagePull"})
JOB_DEFAULT_BACKOFF_LIMIT = 6


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_index_ranges(text: str | None) -> set[int]:
    """``"0-3,7"`` (Job ``completedIndexes``/``failedIndexes``) -> ``{0, 1, 2, 3, 7}``."""
    out: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            out.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            continue
    return out


# -- Jobs -----------------------------------------------------------------------------
@dataclass(frozen=True)
class JobInfo:
    """What a pod cannot tell: the Job's retry settings and outcome."""

    name: str
    role: str
    completions: int
    backoff_limit_per_index: int | None
    backoff_limit: int
    failure_rules: tuple[dict[str, Any], ...] = ()
    failed: tuple[str, str] | None = None  # (reason, message) of condition Failed
    complete: bool = False
    completed_indexes: frozenset[int] = frozenset()
    failed_indexes: frozenset[int] = frozenset()


def job_info(job: dict[str, Any]) -> JobInfo | None:
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    role = (meta.get("labels") or {}).get(naming.LABEL_ROLE)
    if not role:
        return None
    failed = None
    complete = False
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Failed":
            failed = (cond.get("reason") or "Failed", cond.get("message") or "")
        elif cond.get("type") == "Complete":
            complete = True
    bl = spec.get("backoffLimit")
    return JobInfo(
        name=meta.get("name", ""),
        role=role,
        completions=int(spec.get("completions") or spec.get("parallelism") or 1),
        backoff_limit_per_index=spec.get("backoffLimitPerIndex"),
        backoff_limit=JOB_DEFAULT_BACKOFF_LIMIT if bl is None else int(bl),
        failure_rules=tuple((spec.get("podFailurePolicy") or {}).get("rules") or ()),
        failed=failed,
        complete=complete,
        completed_indexes=frozenset(parse_index_ranges(status.get("completedIndexes"))),
        failed_indexes=frozenset(parse_index_ranges(status.get("failedIndexes"))),
    )


def _rule_action(rule: dict[str, Any], pod: dict[str, Any]) -> str | None:
    """The rule's action if it matches this failed pod (Kubernetes podFailurePolicy)."""
    on_codes = rule.get("onExitCodes")
    if on_codes:
        container = on_codes.get("containerName")
        values = set(on_codes.get("values") or ())
        op = on_codes.get("operator", "In")
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if container and cs.get("name") != container:
                continue
            term = (cs.get("state") or {}).get("terminated") or {}
            code = term.get("exitCode")
            if code is None or code == 0:
                continue
            if (op == "In" and code in values) or (op == "NotIn" and code not in values):
                return rule.get("action")
        return None
    on_conditions = rule.get("onPodConditions")
    if on_conditions:
        conds = (pod.get("status") or {}).get("conditions") or []
        for wanted in on_conditions:
            for cond in conds:
                if cond.get("type") == wanted.get("type") and cond.get("status") == wanted.get(
                    "status", "True"
                ):
                    return rule.get("action")
    return None


def failure_action(job: JobInfo | None, pod: dict[str, Any]) -> str:
    """``FailJob`` | ``FailIndex`` | ``Ignore`` | ``Count`` for one failed pod."""
    if job is not None:
        for rule in job.failure_rules:
            action = _rule_action(rule, pod)
            if action:
                return str(action)
    return "Count"


# -- pods -----------------------------------------------------------------------------
def task_key(pod: dict[str, Any]) -> tuple[str, int] | None:
    """(role, index) of a pod, from its role label and Job/StatefulSet index."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    role = labels.get(naming.LABEL_ROLE)
    if not role:
        return None
    annotations = meta.get("annotations") or {}
    raw = (
        annotations.get(ANN_COMPLETION_INDEX)
        or labels.get(LABEL_COMPLETION_INDEX)
        or labels.get(LABEL_POD_INDEX)
    )
    if raw is None:
        # Older StatefulSets: the index is the pod name's ordinal suffix.
        raw = meta.get("name", "").rpartition("-")[2]
    try:
        return role, int(raw)
    except ValueError:
        return None


def is_job_pod(pod: dict[str, Any]) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("kind") == "Job" for r in refs)


def _sort_key(pod: dict[str, Any]) -> tuple[int, float, bool, str]:
    """Older pods of a task first. creationTimestamp has one-second resolution, so the
    Job's attempt counters come first, then a pod still running beats a finished one."""
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    try:
        attempt = int(ann.get(ANN_INDEX_FAILURES, 0)) + int(ann.get(ANN_INDEX_IGNORED, 0))
    except ValueError:
        attempt = 0
    finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    return attempt, parse_time(meta.get("creationTimestamp")) or 0.0, not finished, meta.get("name", "")


def newest_pod(pods: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The pod that speaks for its task now."""
    return max(pods, key=_sort_key, default=None)


def _statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    return list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or [])


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


@dataclass(frozen=True)
class PodVerdict:
    phase: Phase
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    terminal: bool = False  # the pod itself ended (Succeeded/Failed)
    deadline: float | None = None  # when a timeout would turn this pod FAILED


def pod_verdict(
    pod: dict[str, Any], now: float, *, unschedulable_timeout: float, image_pull_timeout: float
) -> PodVerdict:
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase == "Succeeded":
        return PodVerdict(Phase.SUCCEEDED, "Completed", exit_code=0, terminal=True)
    if phase == "Failed":
        return _failed_verdict(pod)
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or now
    for cs in _statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason") or ""
        message = waiting.get("message") or ""
        if reason in FATAL_WAITING:
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            code = last.get("exitCode")
            if reason == "CrashLoopBackOff" and last:
                message = message or f"last exit: {last.get('reason') or 'Error'} (exit code {code})"
            return PodVerdict(Phase.FAILED, reason, message, code)
        if reason in IMAGE_PULL_WAITING:
            pulling_since = _condition(pod, "PodScheduled") or {}
            since = parse_time(pulling_since.get("lastTransitionTime")) or created
            deadline = since + image_pull_timeout
            if now >= deadline:
                return PodVerdict(
                    Phase.FAILED,
                    reason,
                    message or f"image pull failing for more than {image_pull_timeout:g}s",
                )
            return PodVerdict(Phase.PENDING, reason, message, deadline=deadline)
    scheduled = _condition(pod, "PodScheduled")
    if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        since = parse_time(scheduled.get("lastTransitionTime")) or created
        deadline = since + unschedulable_timeout
        message = scheduled.get("message") or ""
        if now >= deadline:
            return PodVerdict(Phase.FAILED, "Unschedulable", message)
        return PodVerdict(Phase.PENDING, "Unschedulable", message, deadline=deadline)
    if phase == "Running":
        return PodVerdict(Phase.RUNNING)
    for cs in _statuses(pod):
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return PodVerdict(Phase.PENDING, reason)
    return PodVerdict(Phase.PENDING, "" if phase == "Pending" else phase)


def _failed_verdict(pod: dict[str, Any]) -> PodVerdict:
    status = pod.get("status") or {}
    terminated = [((cs.get("state") or {}).get("terminated") or {}) for cs in _statuses(pod)]
    terminated = [t for t in terminated if t and t.get("exitCode") not in (None, 0)]
    oom = next((t for t in terminated if t.get("reason") == "OOMKilled"), None)
    if oom is not None:
        return PodVerdict(
            Phase.FAILED,
            "OOMKilled",
            oom.get("message") or "the container exceeded its memory limit",
            oom.get("exitCode"),
            True,
        )
    disruption = _condition(pod, "DisruptionTarget")
    if disruption and disruption.get("status") == "True":
        return PodVerdict(
            Phase.FAILED, disruption.get("reason") or "Disrupted", disruption.get("message") or "", None, True
        )
    if status.get("reason"):  # Evicted, DeadlineExceeded, UnexpectedAdmissionError...
        code = terminated[0].get("exitCode") if terminated else None
        return PodVerdict(Phase.FAILED, status["reason"], status.get("message") or "", code, True)
    if terminated:
        code = terminated[0].get("exitCode")
        message = terminated[0].get("message") or f"exit code {code}"
        return PodVerdict(Phase.FAILED, "ExitCode", message, code, True)
    return PodVerdict(Phase.FAILED, "Error", status.get("message") or "", None, True)


# -- the whole cluster ----------------------------------------------------------------
@dataclass
class Interpreter:
    """Turns the current pods (+ the Jobs, when known) into a :class:`ClusterStatus`.

    ``known`` remembers tasks seen before, so a task whose pods and Job are gone is
    reported ``Deleted`` instead of silently vanishing. ``ignored_roles`` are roles
    deleted on purpose (``delete_roles``): not reported at all.
    """

    unschedulable_timeout: float
    image_pull_timeout: float
    known: dict[tuple[str, int], bool] = field(default_factory=dict)  # key -> is a Job task
    ignored_roles: set[str] = field(default_factory=set)
    # key -> (fingerprint of its pods and Job, result): a watch event touches one task,
    # so only that task is interpreted again, not all 600.
    _memo: dict[tuple[str, int], tuple[Any, TaskStatus, float | None]] = field(default_factory=dict)

    def status(
        self, pods: Iterable[dict[str, Any]], jobs: dict[str, JobInfo] | None, now: float
    ) -> tuple[ClusterStatus, float | None]:
        """The status, and the earliest time a timeout could change it (or None)."""
        by_task: dict[tuple[str, int], list[dict[str, Any]]] = {}
        pods = list(pods)
        for pod in pods:
            key = task_key(pod)
            if key is None or key[0] in self.ignored_roles:
                continue
            by_task.setdefault(key, []).append(pod)
        tasks: dict[tuple[str, int], TaskStatus] = {}
        next_deadline: float | None = None
        for key, group in by_task.items():
            group.sort(key=_sort_key)
            job = (jobs or {}).get(key[0])
            is_job = job is not None or any(is_job_pod(p) for p in group)
            self.known[key] = is_job
            fingerprint = (
                tuple(
                    ((p.get("metadata") or {}).get("uid"), (p.get("metadata") or {}).get("resourceVersion"))
                    for p in group
                ),
                job,
            )
            memo = self._memo.get(key)
            if memo is not None and memo[0] == fingerprint and (memo[2] is None or now < memo[2]):
                task, deadline = memo[1], memo[2]
            else:
                task, deadline = self._task(key, group, job, now)
                self._memo[key] = (fingerprint, task, deadline)
            tasks[key] = task
            if deadline is not None:
                next_deadline = deadline if next_deadline is None else min(next_deadline, deadline)
        if jobs is not None:
            for job in jobs.values():
                if job.role in self.ignored_roles:
                    continue
                for index in range(job.completions):
                    if (job.role, index) not in tasks:
                        tasks[(job.role, index)] = self._podless(job, index)
        exists = bool(pods) or bool(jobs)
        for key, is_job in self.known.items():
            if key in tasks or key[0] in self.ignored_roles or not exists:
                continue
            if is_job and jobs is not None and key[0] not in jobs:
                tasks[key] = TaskStatus(
                    key[0],
                    key[1],
                    Phase.FAILED,
                    "Deleted",
                    f"the {key[0]} Job was deleted while the task ran",
                )
            elif not is_job:
                # A StatefulSet pod vanished: the controller recreates it unless the
                # StatefulSet itself went away; not fatal on its own.
                tasks[key] = TaskStatus(
                    key[0], key[1], Phase.PENDING, "Deleted", "pod deleted; waiting for it to be recreated"
                )
        ordered = tuple(tasks[k] for k in sorted(tasks, key=lambda k: (_ROLE_ORDER.get(k[0], 9), k[0], k[1])))
        return ClusterStatus(tasks=ordered, exists=exists), next_deadline

    def _podless(self, job: JobInfo, index: int) -> TaskStatus:
        if index in job.completed_indexes or (job.complete and not job.failed):
            return TaskStatus(job.role, index, Phase.SUCCEEDED, "Completed", exit_code=0)
        if job.failed:
            return TaskStatus(job.role, index, Phase.FAILED, job.failed[0], job.failed[1])
        if index in job.failed_indexes:
            return TaskStatus(
                job.role, index, Phase.FAILED, "FailedIndex", f"index {index} of Job {job.name} failed"
            )
        return TaskStatus(job.role, index, Phase.PENDING)

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
                + (1 if v.phase is Phase.FAILED and v.terminal else 0),
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
