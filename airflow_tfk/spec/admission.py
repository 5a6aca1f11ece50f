"""How a training cluster is laid out and admitted: the ``layout``, ``queue_name`` and
``capacity_check`` options of the spec, validated here so spec.py stays one concern.

- ``layout: jobs`` (default): a headless Service and an Indexed Job per role, PS included.
- ``layout: jobset``: one JobSet (``jobset.x-k8s.io/v1alpha2``) with a replicated Job per
  role, so Kueue admits the whole cluster as one workload.
- ``queue_name``: the Kueue LocalQueue. The workloads are created suspended and carry
  Kueue's queue label; Kueue un-suspends them when it admits them.
- ``capacity_check``: before anything is created, compare the cluster's requests with what
  the nodes have left (``off``, ``warn`` or ``fail``).
- ``gang_scheduling: native``: one PodGroup (``scheduling.k8s.io/v1beta1``, Kubernetes 1.37+)
  with a gang policy whose ``minCount`` is every task, and every pod joins it
  (``spec.schedulingGroup.podGroupName``): kube-scheduler binds all of them or none.

Pure: no Kubernetes client.
"""

from __future__ import annotations

import enum
import re

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError

__all__ = [
    "KUEUE_QUEUE_LABEL",
    "JOBSET_API_VERSION",
    "POD_GROUP_API_VERSION",
    "CapacityCheck",
    "GangScheduling",
    "Layout",
    "capacity_check",
    "gang_rules",
    "layout",
    "queue_name",
]

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
#: Kubernetes 1.37's PodGroup, served only with the GenericWorkload feature gate and
#: ``--runtime-config=scheduling.k8s.io/v1beta1=true`` (a beta API off by default).
POD_GROUP_API_VERSION = "scheduling.k8s.io/v1beta1"
_QUEUE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class Layout(str, enum.Enum):
    """Which objects hold the tasks: ``jobs``, one Indexed Job per role (the PS's with a
    deadline); ``jobset``, one JobSet of them all (admitted by Kueue as one Workload)."""

    JOBS = "jobs"
    JOBSET = "jobset"


class CapacityCheck(str, enum.Enum):
    """What a shortfall of node capacity does before a cluster is created."""

    OFF = "off"
    WARN = "warn"
    FAIL = "fail"


class GangScheduling(str, enum.Enum):
    """Whether the cluster's pods are scheduled all together or each on its own."""

    NONE = "none"
    NATIVE = "native"


def gang_rules(gang: GangScheduling, layout: Layout, queue_name: str | None) -> None:
    """What native gang scheduling combines with. A JobSet's controller copies the pod
    templates into Jobs itself, and one built against an older Kubernetes API drops a
    field it does not know, so the pods would silently leave the gang. Under Kueue the
    ``jobs`` layout is admitted Job by Job: admitted Jobs would hold their quota while
    their pods wait for the rest of the gang, which another training's admitted half may
    be holding; ``layout: jobset`` is Kueue's own all-or-nothing admission."""
    if gang is not GangScheduling.NATIVE:
        return
    if layout is Layout.JOBSET:
        raise SpecError(
            "gang_scheduling",
            "native needs layout: jobs (the JobSet controller makes the pods, and Kueue "
            "already admits a JobSet as one workload)",
            gang.value,
        )
    if queue_name is not None:
        raise SpecError(
            "gang_scheduling",
            "native cannot be combined with queue_name: Kueue admits the jobs layout Job by Job, "
            "so admitted Jobs would hold quota while waiting for the rest of the gang; use "
            "layout: jobset with queue_name for all-or-nothing admission under Kueue",
            gang.value,
        )


def layout(value: object) -> Layout:
    try:
        return Layout(value)
    except ValueError:
        raise SpecError("layout", f"must be one of {', '.join(x.value for x in Layout)}", value) from None


def capacity_check(value: object) -> CapacityCheck:
    try:
        return CapacityCheck(value)
    except ValueError:
        raise SpecError(
            "capacity_check", f"must be one of {', '.join(x.value for x in CapacityCheck)}", value
        ) from None


def queue_name(value: object) -> str | None:
    """A LocalQueue name: a DNS-1123 subdomain that is also a label value (it travels
    as the value of Kueue's queue label)."""
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not _QUEUE.fullmatch(value)
        or not naming.is_dns1123_subdomain(value)
        or not naming.is_label_value(value)
    ):
        raise SpecError(
            "queue_name",
            "must be a LocalQueue name: at most 63 lowercase letters, digits, '-' or '.', "
            "starting and ending with a letter or digit",
            value,
        )
    return value
