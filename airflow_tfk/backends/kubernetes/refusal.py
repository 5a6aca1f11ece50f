"""Why a Job has fewer pods than it should: the API server refused the pods its controller
tried to create (a ResourceQuota, a LimitRange, Pod Security admission, an admission
webhook or policy, a missing ServiceAccount). Pure: the read is
:func:`._k8s_reads.refusal_plan`.

Why Events: a refused pod never exists, so no pod status can say it; the Job's status
only counts fewer active pods, and its controller records each refusal as a
``FailedCreate`` Event on the Job. Without reading them a wait would stay pending,
saying nothing, until the training's deadline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from airflow_tfk.backends.kubernetes.status import JobInfo, parse_time

EVENT_REASON = "FailedCreate"
# A refusal the Job controller has not repeated for this long is over (it retries at
# most every minute while it keeps failing).
RECENT_SECONDS = 90.0

# (reason, permanent, pattern). Permanent: the same pod template is refused every time,
# so waiting cannot help. A quota frees up when other pods end: it waits as long as an
# unschedulable pod would.
_KINDS: tuple[tuple[str, bool, re.Pattern[str]], ...] = (
    ("QuotaExceeded", False, re.compile(r"exceeded quota")),
    # a quota on CPU or memory with no LimitRange default: the pods name no resources
    ("QuotaNeedsResources", True, re.compile(r"must specify (limits|requests)")),
    ("PodSecurity", True, re.compile(r"violates PodSecurity")),
    (
        "LimitRange",
        True,
        re.compile(r"(maximum|minimum) \S+ usage per (Container|Pod)|limit to request ratio"),
    ),
    ("AdmissionDenied", True, re.compile(r"denied (the )?request|ValidatingAdmissionPolicy")),
    ("ServiceAccountMissing", False, re.compile(r"error looking up service account")),
    ("RBACForbidden", True, re.compile(r"cannot [a-z]+ resource")),
)
# `Error creating: pods "x" is forbidden: <why>`, `jobs.batch "x" is invalid: <why>`
_PREFIX = re.compile(r'^(?:Error creating: )?[\w.]+ (?:"[^"]*" )?is (?:forbidden|invalid): ')


@dataclass(frozen=True)
class Refusal:
    """The newest refusal of a Job's pods: its cause, the API server's words, since when."""

    reason: str
    message: str
    since: float
    permanent: bool


def short_of_pods(job: JobInfo) -> bool:
    """Whether the Job runs fewer pods than it has indexes left to run (and is not held
    back on purpose: suspended by a queue, or finished)."""
    if job.suspended or job.failed or job.complete:
        return False
    left = job.completions - len(job.completed_indexes | job.failed_indexes)
    return job.active < left


def classify(message: str, default: str = EVENT_REASON) -> tuple[str, bool]:
    """The cause of one refusal message, and whether it is permanent."""
    for reason, permanent, pattern in _KINDS:
        if pattern.search(message):
            return reason, permanent
    return default, False


def detail(message: str) -> str:
    """The API server's reason of a refusal, without the words that only name the object."""
    return _PREFIX.sub("", message.strip())


def refusal_of(events: list[dict[str, Any]], now: float) -> Refusal | None:
    """The refusal the Job's ``FailedCreate`` Events say is going on (None: none recent)."""
    recent = []
    for event in events:
        last = _time(event, "lastTimestamp")
        if last is not None and now - last <= RECENT_SECONDS:
            recent.append((last, _time(event, "firstTimestamp") or last, str(event.get("message") or "")))
    if not recent:
        return None
    recent.sort()
    _, _, message = recent[-1]
    since = min(first for _, first, _ in recent)
    reason, permanent = classify(message)
    return Refusal(reason, f"the API server refused the pod: {detail(message)}", since, permanent)


def _time(event: dict[str, Any], key: str) -> float | None:
    return parse_time(event.get(key)) or parse_time(event.get("eventTime"))
