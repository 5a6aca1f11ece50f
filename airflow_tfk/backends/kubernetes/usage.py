"""Each pod's run as a cost counts it, from the pods themselves: from when its training
container started to when it ended (or now, for one still running), times the pod's
effective requests (what the scheduler reserved). Every pod of the cluster counts, a
failed attempt's too (its Job keeps it until the Job goes). One pod list."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.plan import Request, single
from airflow_tfk.core import naming
from airflow_tfk.core.usage import TaskUsage
from airflow_tfk.kube.api import BY_KIND
from airflow_tfk.spec.capacity import pod_requests


def usage_plan(ref: ClusterRef) -> Any:
    return single(
        Request("GET", BY_KIND["Pod"].collection(ref.namespace), {"labelSelector": ref.label_selector})
    )


def _time(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_span(pod: Mapping[str, Any], now: float) -> float:
    """Seconds the pod's containers ran: the earliest container start to the latest end
    (now while one still runs); 0 for a pod none of whose containers has started."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    starts: list[float] = []
    ends: list[float] = []
    for c in statuses:
        state = c.get("state") or {}
        running, terminated = state.get("running"), state.get("terminated")
        if running is not None and (t := _time(running.get("startedAt"))) is not None:
            starts.append(t)
            ends.append(now)
        elif terminated is not None and (t := _time(terminated.get("startedAt"))) is not None:
            starts.append(t)
            ends.append(_time(terminated.get("finishedAt")) or now)
    if not starts:
        return 0.0
    return max(0.0, max(ends) - min(starts))


def pods_usage(pods: Sequence[Mapping[str, Any]], now: float | None = None) -> list[TaskUsage]:
    now = time.time() if now is None else now
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        role = (meta.get("labels") or {}).get(naming.LABEL_ROLE, "")
        out.append(TaskUsage(str(meta.get("name", "")), str(role), pod_span(pod, now), pod_requests(pod)))
    return out
