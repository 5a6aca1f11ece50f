"""Why a TF Serving or TensorBoard pod cannot serve, from its status and its log.

These pods are a Deployment's (``restartPolicy: Always``): a container that dies is
started again, so a crash never shows as a failed pod, only as restarts, a last
termination and ``CrashLoopBackOff``. The reading of one pod's status is the training's
(:func:`airflow_tfk.backends.kubernetes.status.pod_verdict`), asked with no grace for image
pulls or scheduling: a publish or a TensorBoard start has no retry budget of its own to
wait for, and a person is waiting for its answer. On top of it, what only a restarting
container tells: its last termination (an OOM kill, a non-zero exit) once it has repeated.

Only the targets' pod reads (:class:`PodHealth`) talk to the API server; the rest is
pure and table-tested.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from airflow_tfk.backends.kubernetes.status import PodVerdict, pod_verdict
from airflow_tfk.core.excerpt import failure_excerpt
from airflow_tfk.core.status import Phase
from airflow_tfk.kube.api import BY_KIND, error_message

#: how many lines of the pod's log the failure message carries
LOG_LINES = 15
#: restarts after which a container that keeps exiting non-zero is a crash loop, even
#: while the kubelet has it running again between back-offs
CRASH_RESTARTS = 2
# Pods that were taken away (node pressure, preemption, a drain) are replaced by the
# ReplicaSet; their failure says nothing about the image or the model.
# The scheduler's word for a claim that a provisioner has not bound yet (seconds, usually).
_BINDING = "unbound immediate PersistentVolumeClaims"
_REPLACED = frozenset({"Evicted", "Preempting", "DeletionByTaintManager", "TerminationByKubelet"})


def is_ready(pod: dict[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def is_running(pod: dict[str, Any]) -> bool:
    """The pod's containers all run and it is not going away: its server listens, or will
    in a moment, whether or not it is Ready yet."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(containers)
        and all("running" in (cs.get("state") or {}) and cs.get("started", True) for cs in containers)
    )


def _restarted(pod: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
    """(last termination, restart count) of the container that died last with a non-zero
    exit; None when none did."""
    found = None
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if last and last.get("exitCode") not in (None, 0):
            restarts = int(cs.get("restartCount") or 0)
            if found is None or restarts > found[1]:
                found = (last, restarts)
    return found


def pod_problem(pod: dict[str, Any], now: float) -> PodVerdict | None:
    """A FAILED verdict when this pod cannot serve and will not by itself; None while it
    serves or may still start (scheduled, pulling, starting, a first restart)."""
    if is_ready(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return None
    verdict = pod_verdict(pod, now, unschedulable_timeout=0.0, image_pull_timeout=0.0)
    last = _restarted(pod)
    if verdict.phase is Phase.FAILED:
        if verdict.terminal and verdict.reason in _REPLACED:
            return None
        if verdict.reason == "Unschedulable" and _BINDING in verdict.message:
            return None  # a claim being provisioned: the scheduler places it once bound
        if verdict.reason == "CrashLoopBackOff" and last and last[0].get("reason") == "OOMKilled":
            # the back-off is the kubelet's answer; the kill is the cause
            return PodVerdict(
                Phase.FAILED,
                "OOMKilled",
                f"killed at its memory limit, restarted {last[1]} time(s), now in CrashLoopBackOff",
                last[0].get("exitCode"),
            )
        return verdict
    if last is None:
        return None
    term, restarts = last
    if term.get("reason") == "OOMKilled":
        return PodVerdict(
            Phase.FAILED,
            "OOMKilled",
            f"killed at its memory limit (exit code {term.get('exitCode')}), restarted {restarts} time(s)",
            term.get("exitCode"),
        )
    if restarts >= CRASH_RESTARTS:
        return PodVerdict(
            Phase.FAILED,
            "CrashLoopBackOff",
            f"the container exited with code {term.get('exitCode')} ({term.get('reason') or 'Error'}) "
            f"and was restarted {restarts} times",
            term.get("exitCode"),
        )
    return None


def first_problem(pods: Iterable[dict[str, Any]], now: float) -> tuple[dict[str, Any], PodVerdict] | None:
    """The pod that says why nothing serves: None as soon as one pod is Ready (it
    serves; another's trouble is a rollout's, not this request's)."""
    pods = list(pods)
    if any(is_ready(p) for p in pods):
        return None
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""):
        verdict = pod_problem(pod, now)
        if verdict is not None:
            return pod, verdict
    return None


def describe(pod: dict[str, Any], verdict: PodVerdict, log_text: str) -> str:
    """``pod NAME: REASON (exit code N): MESSAGE`` and the last lines of its log."""
    name = (pod.get("metadata") or {}).get("name", "?")
    head = f"pod {name}: {verdict.reason}"
    if verdict.exit_code is not None:
        head += f" (exit code {verdict.exit_code})"
    if verdict.message:
        head += f": {verdict.message.strip()[:1000]}"
    excerpt = failure_excerpt(log_text, LOG_LINES)
    if excerpt:
        head += (
            f"\n----- last lines of the log of {name} -----\n{excerpt}\n----- end of the log of {name} -----"
        )
    return head


class PodHealth:
    """The pod reads of a target that runs a Deployment (or a Job) in ``namespace``:
    list its pods by label, read a failing one's log. Mixed into the Kubernetes targets,
    which provide ``api``."""

    api: Any

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        _, body = self.api.request("GET", BY_KIND["Pod"].collection(namespace), {"labelSelector": selector})
        return list((body or {}).get("items") or [])

    def pod_log(self, namespace: str, pod: dict[str, Any]) -> str:
        """The last lines of the pod's first container's log: of its previous run when it
        is not running now (a crash loop's current container has no log yet)."""
        spec = pod.get("spec") or {}
        containers = [c.get("name") for c in spec.get("containers") or []]
        if not containers:
            return ""
        statuses = {cs.get("name"): cs for cs in (pod.get("status") or {}).get("containerStatuses") or []}
        cs = statuses.get(containers[0]) or {}
        previous = "running" not in (cs.get("state") or {}) and bool(cs.get("restartCount"))
        path = BY_KIND["Pod"].item(namespace, pod["metadata"]["name"]) + "/log"
        query: dict[str, Any] = {"container": containers[0], "tailLines": 200}
        text = ""
        for attempt in (True, False) if previous else (False,):
            try:
                return str(self.api.text(path, {**query, "previous": attempt} if attempt else query))
            except Exception as exc:  # no log (yet) is an answer, not an error
                text = f"(no log: {error_message(exc)})"
        return text

    def pod_failure(
        self, namespace: str, selector: str, pods: list[dict[str, Any]] | None = None
    ) -> str | None:
        """Why the pods of ``selector`` (listed now, unless given) cannot serve, with the
        failing pod's log; None while one serves or they may still start."""
        if pods is None:
            pods = self.pods(namespace, selector)
        found = first_problem(pods, time.time())
        if found is None:
            return None
        pod, verdict = found
        return describe(pod, verdict, self.pod_log(namespace, pod))
