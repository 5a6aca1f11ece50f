"""One-shot reads of a cluster, as request plans (:mod:`.plan`) that the backend's
blocking methods run with the sync client and a wait's watcher with the async one: the
status from one pod list, a task's log, Kueue's reason, whether a JobSet is making the
Jobs, why a cluster was deleted, why the API server refuses a Job's pods."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.cluster import Interpreter
from airflow_tfk.backends.kubernetes.plan import Plan, Request, list_plan
from airflow_tfk.backends.kubernetes.refusal import EVENT_REASON, refusal_of, short_of_pods
from airflow_tfk.backends.kubernetes.status import (
    LABEL_COMPLETION_INDEX,
    JobInfo,
    is_job_pod,
    job_info,
    newest_pod,
    task_key,
)
from airflow_tfk.core import naming
from airflow_tfk.core.naming import LABEL_PREFIX
from airflow_tfk.kube.api import BY_KIND, Kind

if TYPE_CHECKING:
    from airflow_tfk.backends.kubernetes.watch import WatchSession

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


def status_plan(
    ref: ClusterRef, interp: Interpreter, job_cache: dict[ClusterRef, dict[str, JobInfo]]
) -> Plan:
    """One pod list; the Jobs (retry settings) are listed once and when a Job task vanished."""
    pods, _ = yield from list_plan(ref, "Pod")
    jobs = job_cache.get(ref)
    if jobs is None or jobs_stale(interp, pods, jobs):
        items, _ = yield from list_plan(ref, "Job")
        jobs = job_cache[ref] = jobs_of(items)
    for role, job in jobs.items():
        refusal = None
        if short_of_pods(job_with_pods(job, pods)):  # why pods are missing: a refusal?
            refusal = yield from refusal_plan(ref, job.name, time.time())
        if refusal is None:
            interp.refused.pop(role, None)
        else:
            interp.refused[role] = refusal
    status, _ = interp.status(pods, jobs, time.time())
    if not status.exists and (yield from jobset_exists_plan(ref)):
        job_cache.pop(ref, None)  # its JobSet is (re)making the Jobs: list them next time
        return dataclasses.replace(status, exists=True)
    if not status.exists:
        reason = yield from deleted_reason_plan(ref)
        status = dataclasses.replace(status, deleted_reason=reason)
    return status


def job_with_pods(job: JobInfo, pods: list[dict[str, Any]]) -> JobInfo:
    """The Job as its pods show it now: a cached Job's counts are from when it was listed."""
    active: set[int] = set()
    done: set[int] = set()
    for pod in pods:
        key = task_key(pod)
        if key is None or key[0] != job.role:
            continue
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Succeeded":
            done.add(key[1])
        elif phase != "Failed" and not (pod.get("metadata") or {}).get("deletionTimestamp"):
            active.add(key[1])
    return dataclasses.replace(job, active=len(active), completed_indexes=job.completed_indexes | done)


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
    if seen is not None:  # a pod read for trouble, or the one the last log read found
        pod = newest_pod([*seen.tracker.pods_of((role, index)), *seen.log_pods.get((role, index), ())])
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
    if seen is not None:
        seen.log_pods[(role, index)] = [pod]
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    container = "tensorflow" if "tensorflow" in containers else (containers[0] if containers else None)
    path = BY_KIND["Pod"].item(ref.namespace, pod["metadata"]["name"]) + "/log"
    # 400: the container has not started yet; 404: the pod just went away.
    result = yield Request(
        "GET", path, {"container": container, **params}, text=True, what=f"logs of {role}-{index}"
    )
    if result is None and seen is not None:
        seen.log_pods.pop((role, index), None)  # gone or not started: look again next time
    return str(result[1]) if result else ""


ACTIVITY_LOG = {"tailLines": 1, "timestamps": "true"}


def queue_plan(ref: ClusterRef) -> Plan:
    """Kueue's pending reason for the cluster's Workloads; None when nothing waits or
    Kueue is not installed (its API answers 404)."""
    from airflow_tfk.backends.kubernetes.kueue import WORKLOAD_API_VERSIONS, queue_message

    for version in WORKLOAD_API_VERSIONS:
        kind = Kind("Workload", version, "workloads")
        result = yield Request("GET", kind.collection(ref.namespace), optional=True)
        if result is not None:
            return queue_message((result[1] or {}).get("items") or [], ref.name)
    return None


def refusal_plan(ref: ClusterRef, job: str, now: float) -> Plan:
    """The Job's current refusal, from its ``FailedCreate`` Events (None: none; an identity
    that may not list Events sees none)."""
    selector = f"involvedObject.kind=Job,involvedObject.name={job},reason={EVENT_REASON}"
    result = yield Request(
        "GET", BY_KIND["Event"].collection(ref.namespace), {"fieldSelector": selector}, optional=True
    )
    events = ((result[1] if result else None) or {}).get("items") or []
    return refusal_of(events, now)
