"""Pod and Job JSON as the API server returns them, built by hand for the pure status code
(no server needed): only the fields the interpretation reads, with the labels and
annotations the Job controller sets."""

from __future__ import annotations

import itertools
from typing import Any

from airflow_tfk.core import naming

_RV = itertools.count(1)
T0 = "2026-11-22T10:00:00Z"
T0_EPOCH = 1795341600.0  # T0 as UNIX time


def pod(
    role: str,
    index: int,
    phase: str = "Pending",
    *,
    cluster: str = "c",
    attempt: int = 0,
    containers: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    """One pod of task ``role``-``index``, as the Job controller makes it."""
    labels = {
        naming.LABEL_CLUSTER: cluster,
        naming.LABEL_ROLE: role,
        naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
    }
    labels["batch.kubernetes.io/job-completion-index"] = str(index)
    annotations = {
        "batch.kubernetes.io/job-completion-index": str(index),
        "batch.kubernetes.io/job-index-failure-count": str(attempt),
    }
    name = f"{cluster}-{role}-{index}-a{attempt}"
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if containers is not None:
        status["containerStatuses"] = containers
    if reason:
        status["reason"] = reason
        status["message"] = message
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(next(_RV)),
            "creationTimestamp": T0,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"kind": "Job", "name": f"{cluster}-{role}"}],
        },
        "spec": {"containers": [{"name": "tensorflow"}]},
        "status": status,
    }


def terminated(exit_code: int, reason: str = "Error", message: str = "") -> list[dict[str, Any]]:
    return [
        {
            "name": "tensorflow",
            "state": {"terminated": {"exitCode": exit_code, "reason": reason, "message": message}},
        }
    ]


def waiting(reason: str, message: str = "", last_exit: int | None = None) -> list[dict[str, Any]]:
    cs: dict[str, Any] = {"name": "tensorflow", "state": {"waiting": {"reason": reason, "message": message}}}
    if last_exit is not None:
        cs["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error"}}
    return [cs]


def scheduled(status: str = "True", reason: str = "", message: str = "", since: str = T0) -> dict[str, Any]:
    return {
        "type": "PodScheduled",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


def with_status(
    p: dict[str, Any], phase: str, containers: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The same pod in a later state (a new resourceVersion)."""
    status: dict[str, Any] = {"phase": phase, "conditions": p["status"].get("conditions", [])}
    if containers is not None:
        status["containerStatuses"] = containers
    meta = {**p["metadata"], "resourceVersion": str(next(_RV))}
    return {**p, "metadata": meta, "status": status}


def job(
    role: str,
    completions: int,
    *,
    cluster: str = "c",
    backoff_limit_per_index: int | None = None,
    backoff_limit: int | None = None,
    rules: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    completed: str = "",
    failed: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"completions": completions, "parallelism": completions}
    if backoff_limit_per_index is not None:
        spec["backoffLimitPerIndex"] = backoff_limit_per_index
    if backoff_limit is not None:
        spec["backoffLimit"] = backoff_limit
    if rules:
        spec["podFailurePolicy"] = {"rules": rules}
    return {
        "metadata": {
            "name": f"{cluster}-{role}",
            "labels": {
                naming.LABEL_CLUSTER: cluster,
                naming.LABEL_ROLE: role,
                naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
            },
        },
        "spec": spec,
        "status": {"conditions": conditions or [], "completedIndexes": completed, "failedIndexes": failed},
    }
