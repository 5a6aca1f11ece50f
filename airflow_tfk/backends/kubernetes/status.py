"""One pod (plain API JSON) -> its verdict; one Job -> what a pod cannot tell. Pure: no I/O.

The whole cluster's status is built from these by :mod:`.cluster`. Why not in the
watch loop: the same interpretation serves ``status`` (one list) and the wait's pod
watch, and is table-tested on hand-written JSON.

Rules (see docs/architecture.md, "Status model"): a task is ``(role, index)``; its newest
pod decides its phase. A failed pod whose Job index still has retries left is not failed
(the Job controller replaces it); ``Phase.FAILED`` means failed for good.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.status import Phase

ANN_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
ANN_INDEX_FAILURES = "batch.kubernetes.io/job-index-failure-count"
ANN_INDEX_IGNORED = "batch.kubernetes.io/job-index-ignored-failure-count"
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


def latest_instant(value: str | None) -> float | None:
    """The latest moment an API timestamp can stand for. Conditions and creation times are
    whole seconds, cut down (``...T01:45:34Z`` for 01:45:34.9): a timeout counted from the
    parsed value could end up to a second early, so it is counted from the end of that
    second. A timestamp with a fraction is exact."""
    at = parse_time(value)
    if at is None or "." in (value or ""):
        return at
    return at + 1.0


def log_line_time(text: str) -> float | None:
    """The kubelet's timestamp of the newest line of a log read with ``timestamps=true``
    (``2026-11-25T18:40:17.117440123Z <line>``; RFC 3339 with nanoseconds)."""
    lines = text.strip().splitlines()
    stamp = lines[-1].split(" ", 1)[0] if lines else ""
    head, dot, frac = stamp.partition(".")
    if dot:  # Python reads at most microseconds
        digits = frac.rstrip("Z")
        stamp = f"{head}.{digits[:6].ljust(6, '0')}Z" if digits.isdigit() else stamp
    return parse_time(stamp)


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
    active: int = 0  # pods not finished
    ready: int | None = None  # of those, ready (None: a server that does not count them)
    failed_pods: int = 0  # pods that failed and were counted (status.failed)
    suspended: bool = False  # held back on purpose (a queue has not admitted it)


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
        active=int(status.get("active") or 0),
        ready=None if status.get("ready") is None else int(status["ready"]),
        failed_pods=int(status.get("failed") or 0),
        suspended=bool(spec.get("suspend")),
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
    """(role, index) of a pod, from its role label and its Job completion index."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    role = labels.get(naming.LABEL_ROLE)
    if not role:
        return None
    annotations = meta.get("annotations") or {}
    raw = annotations.get(ANN_COMPLETION_INDEX) or labels.get(LABEL_COMPLETION_INDEX) or ""
    try:
        return role, int(raw)
    except ValueError:
        return None


#: Annotations a pod's verdict reads; a pod kept by a watch keeps only these.
_KEPT_ANNOTATIONS = (ANN_COMPLETION_INDEX, ANN_INDEX_FAILURES, ANN_INDEX_IGNORED)


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The part of a pod that its verdict and its log read need: identity, owner kinds,
    the Job's annotations, container names, and the status. A watch keeps one per pod for
    the whole wait, and a pod's spec (a TF1 worker's argv names every host: tens of kB at
    2,000 workers) and managed fields would make the waiter grow with the cluster."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = pod.get("spec") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "labels": meta.get("labels") or {},
            "annotations": {k: annotations[k] for k in _KEPT_ANNOTATIONS if k in annotations},
            "creationTimestamp": meta.get("creationTimestamp"),
            "ownerReferences": [{"kind": r.get("kind")} for r in meta.get("ownerReferences") or []],
        },
        "spec": {"containers": [{"name": c.get("name")} for c in spec.get("containers") or []]},
        "status": pod.get("status") or {},
    }


def pod_id(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return meta.get("uid") or meta.get("name", "")


def is_ready(pod: dict[str, Any]) -> bool:
    cond = _condition(pod, "Ready") or {}
    return cond.get("status") == "True"


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
    created = latest_instant((pod.get("metadata") or {}).get("creationTimestamp")) or now
    waiting = _waiting_verdict(pod, now, created, image_pull_timeout)
    if waiting is not None:
        return waiting
    scheduled = _condition(pod, "PodScheduled")
    if scheduled and scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        since = latest_instant(scheduled.get("lastTransitionTime")) or created
        deadline = since + unschedulable_timeout
        message = scheduled.get("message") or ""
        if unschedulable_timeout <= 0 or now >= deadline:  # 0: at once
            return PodVerdict(Phase.FAILED, "Unschedulable", message)
        return PodVerdict(Phase.PENDING, "Unschedulable", message, deadline=deadline)
    if phase == "Running":
        return PodVerdict(Phase.RUNNING)
    for cs in _statuses(pod):
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return PodVerdict(Phase.PENDING, reason)
    return PodVerdict(Phase.PENDING, "" if phase == "Pending" else phase)


def _waiting_verdict(
    pod: dict[str, Any], now: float, created: float, image_pull_timeout: float
) -> PodVerdict | None:
    """A container waiting for a reason that fails the task now (or after a timeout)."""
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
            since = latest_instant(pulling_since.get("lastTransitionTime")) or created
            deadline = since + image_pull_timeout
            if image_pull_timeout <= 0 or now >= deadline:  # 0: at once
                return PodVerdict(
                    Phase.FAILED,
                    reason,
                    message or f"image pull failing for more than {image_pull_timeout:g}s",
                )
            return PodVerdict(Phase.PENDING, reason, message, deadline=deadline)
    return None


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
