"""Every default of the provider, in one table.

Operators, the sensor, the trigger, the wait loop, the backends, the training files and
the example DAGs take their defaults from here, so a default is changed in one place and
documented once. What a deployment may override through its environment (``TFK_*``) is
read in :mod:`airflow_tfk.dag_env`, which falls back to these values. Import-free.
"""

from __future__ import annotations

import enum
from typing import Final, Literal

#: Seconds between two progress lines (step/total/%/ETA) in the task log.
PROGRESS_INTERVAL_SECONDS: Final = 30.0
#: A running training fails as stalled after this many progress intervals without a new
#: step (``stall_seconds``' default; warned at half), and never sooner than
#: :data:`STALL_SECONDS_FLOOR`: long enough for a slow evaluation or checkpoint between two
#: progress lines and for the wait's reads, which back off to four intervals while the
#: step stands still; short enough that a frozen worker is named within minutes.
STALL_PROGRESS_INTERVALS: Final = 10
STALL_SECONDS_FLOOR: Final = 120.0
#: ``stall_seconds``' default at the default progress interval (300 s); 0 turns it off.
STALL_SECONDS: Final = STALL_PROGRESS_INTERVALS * PROGRESS_INTERVAL_SECONDS
#: The cncf ``kubernetes`` connection.
KUBERNETES_CONN_ID: Final = "kubernetes_default"
#: Server-side apply field manager of every object the provider applies.
FIELD_MANAGER: Final = "airflow-tfk"
#: Seconds between the training's success and the deletion of the PS (the seeds' 30 s).
PS_GRACE_SECONDS: Final = 30
#: Seconds a pod may stay unschedulable before its task fails (``Unschedulable``).
UNSCHEDULABLE_TIMEOUT_SECONDS: Final = 300.0
#: Seconds a pod may fail to pull its image before its task fails.
IMAGE_PULL_TIMEOUT_SECONDS: Final = 120.0
#: Prefix of the cluster name derived from the task instance.
NAME_PREFIX: Final = "tfk"
#: Namespace of the clusters, TF Serving and TensorBoard when a spec names none.
NAMESPACE: Final = "default"
#: The training image (built from images/training/Dockerfile).
IMAGE: Final = "airflow-tfk/training:2.21.0"
#: The claims (PVCs on Kubernetes; shared directories with the local backend) the example
#: DAGs keep logs and models on, so they outlive the clusters that wrote them.
LOGS_CLAIM: Final = f"{NAME_PREFIX}-logs"
MODELS_CLAIM: Final = f"{NAME_PREFIX}-models"
#: The task whose URL the "TensorBoard" extra link opens.
TENSORBOARD_TASK_ID: Final = "tensorboard"
#: Seconds between two pokes of the blocking sensor.
SENSOR_POKE_INTERVAL_SECONDS: Final = 10

PodSecurityLevel = Literal["privileged", "baseline", "restricted"]
POD_SECURITY_LEVELS: Final[tuple[PodSecurityLevel, ...]] = ("privileged", "baseline", "restricted")
#: The Pod Security Standard level the namespaces the provider creates enforce (and warn
#: and audit at), so a per-training namespace is never weaker than the hardened pods the
#: templates render, whatever the cluster's own default is. The platform policy sets it;
#: this is its default, and the one place the level is read from.
POD_SECURITY_LEVEL: Final[PodSecurityLevel] = "restricted"


def pod_security_level(value: object, field: str = "pod_security_level") -> PodSecurityLevel:
    """``value`` as a Pod Security level, or a ValueError naming ``field``."""
    for level in POD_SECURITY_LEVELS:
        if value == level:
            return level
    raise ValueError(f"{field}: must be one of {', '.join(POD_SECURITY_LEVELS)} (got {value!r})")


class BackendKind(str, enum.Enum):
    """Where a cluster runs. A ``str`` enum: it compares equal to its name as written in
    specs, training files and ``conf`` (``"kubernetes"``), and serialises as that text."""

    KUBERNETES = "kubernetes"
    LOCAL = "local"

    def __str__(self) -> str:
        return self.value


BACKEND_KINDS: Final[tuple[str, ...]] = tuple(k.value for k in BackendKind)
#: The backend an operator or a training file runs on unless told otherwise. Kubernetes is
#: the product: a training meant for the cluster must never quietly run as processes
#: beside the scheduler. The local backend is always chosen by name (``backend: local``,
#: or ``TFK_BACKEND=local``, which ``airflow-tfk airflow`` sets for a local Airflow).
BACKEND: Final[str] = BackendKind.KUBERNETES.value


def backend_kind(value: object, field: str = "backend") -> BackendKind:
    """``value`` as a backend kind, or a ValueError naming ``field``."""
    for kind in BackendKind:
        if value == kind.value:
            return kind
    raise ValueError(f"{field}: must be 'kubernetes' or 'local' (got {value!r})")


class Cleanup(str, enum.Enum):
    """What TFTrainingOperator deletes after success."""

    PS = "ps"  # the roles that never exit (PS; workers in parameter_server mode), after the grace
    ALL = "all"  # the whole cluster (logs are copied first)


#: What TFTrainingOperator deletes after success unless told otherwise.
CLEANUP: Final = Cleanup.PS


class TensorBoardAction(str, enum.Enum):
    START = "start"
    STOP = "stop"


def choice(enum_type: type[enum.Enum], value: object, field: str) -> enum.Enum:
    """``value`` as a member of ``enum_type``, or a ValueError naming ``field`` and the choices."""
    try:
        return enum_type(value)
    except ValueError:
        allowed = " or ".join(repr(m.value) for m in enum_type)
        raise ValueError(f"{field}: must be {allowed} (got {value!r})") from None
