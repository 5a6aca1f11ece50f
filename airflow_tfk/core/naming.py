"""Kubernetes naming rules and the names and labels this project generates.

One place for DNS rules, label sanitising and the deterministic cluster name, so the
validator and the renderer can never disagree about what a name will be.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass

from airflow_tfk.core.constants import NAME_PREFIX, POD_SECURITY_LEVEL, PodSecurityLevel, pod_security_level

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

MANAGED_BY = "airflow-tfk"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PREFIX = "tfk.airflow.apache.org"
LABEL_CLUSTER = f"{LABEL_PREFIX}/cluster"
# What every selector of the provider's objects requires besides the cluster's name: an
# object someone else made with the same cluster label (a person's data claim, another
# tool's Service, a namespace) is never listed, reattached to or deleted.
MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"
LABEL_ROLE = f"{LABEL_PREFIX}/role"
LABEL_DAG = f"{LABEL_PREFIX}/dag-id"
LABEL_TASK = f"{LABEL_PREFIX}/task-id"
LABEL_RUN = f"{LABEL_PREFIX}/run-id"
LABEL_MAP_INDEX = f"{LABEL_PREFIX}/map-index"
# The exact owner (annotations keep the values labels must sanitise; the keys are the
# labels') and the spec the cluster was made from: what a retry compares before it reattaches.
ANNOTATION_DAG = LABEL_DAG
ANNOTATION_TASK = LABEL_TASK
ANNOTATION_RUN = LABEL_RUN
ANNOTATION_MAP_INDEX = LABEL_MAP_INDEX
ANNOTATION_SPEC_HASH = f"{LABEL_PREFIX}/spec-hash"
# max_duration_seconds on every object: what the sweeper enforces where Kubernetes does not
# time out by itself (the local backend's processes); every Job also carries it as
# activeDeadlineSeconds.
ANNOTATION_MAX_DURATION = f"{LABEL_PREFIX}/max-duration-seconds"
# Pod Security admission's namespace labels (https://kubernetes.io/docs/concepts/security/pod-security-admission/)
POD_SECURITY_PREFIX = "pod-security.kubernetes.io"
POD_SECURITY_MODES = ("enforce", "warn", "audit")


def pod_security_labels(level: PodSecurityLevel = POD_SECURITY_LEVEL) -> dict[str, str]:
    """The labels a namespace the provider creates carries: ``level`` enforced against the
    newest version of the standard, and warned and audited at the same level."""
    level = pod_security_level(level)
    labels: dict[str, str] = {}
    for mode in POD_SECURITY_MODES:
        labels[f"{POD_SECURITY_PREFIX}/{mode}"] = level
        labels[f"{POD_SECURITY_PREFIX}/{mode}-version"] = "latest"
    return labels


# Airflow stores the map index in a 32-bit integer column.
MAP_INDEX_MAX = 2**31 - 1


def is_dns1035_label(value: str) -> bool:
    """Service names: lowercase alphanumerics and '-', start with a letter, at most 63."""
    return len(value) <= DNS1123_LABEL_MAX and bool(_DNS1035_LABEL.fullmatch(value))


def is_dns1123_label(value: str) -> bool:
    return len(value) <= DNS1123_LABEL_MAX and bool(_DNS1123_LABEL.fullmatch(value))


def is_dns1123_subdomain(value: str) -> bool:
    return len(value) <= DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN.fullmatch(value))


def is_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE.fullmatch(value))


def is_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not is_dns1123_subdomain(prefix):  # "/x" has an empty, invalid prefix
        return False
    return len(name) <= 63 and bool(_LABEL_KEY_NAME.fullmatch(name))


def is_env_name(value: str) -> bool:
    """An env var name every supported API server takes: ``IsEnvVarName`` of Kubernetes
    before 1.32 (the C-identifier-like class, and not ``.``, ``..`` nor ``..``-prefixed,
    which a kubelet would take for directories). 1.32 and later relax it to printable
    ASCII without ``=`` (RelaxedEnvironmentVariableValidation); the spec keeps the
    stricter rule, which every version admits."""
    return bool(_ENV_NAME.fullmatch(value)) and value != "." and not value.startswith("..")


def is_relaxed_env_name(value: str) -> bool:
    """``IsRelaxedEnvVarName``: printable ASCII (space to '~') except '='; not empty."""
    return bool(value) and all(" " <= c <= "~" and c != "=" for c in value)


def short_hash(*parts: str, length: int = 8) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return digest[:length]


def safe_label_value(value: str) -> str:
    """Turn any string into a valid label value; long or rewritten values get a hash suffix.

    Distinct inputs stay distinct: whenever characters are dropped or replaced, a hash of
    the original is appended.
    """
    if is_label_value(value):
        return value
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", value).strip("-_.")
    suffix = short_hash(value)
    cleaned = cleaned[: LABEL_VALUE_MAX - len(suffix) - 1].rstrip("-_.")
    return f"{cleaned}-{suffix}" if cleaned else suffix


def cluster_name_for(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int = -1,
    prefix: str = NAME_PREFIX,
    max_length: int = 30,
) -> str:
    """Deterministic cluster name for one Airflow task instance.

    The same (dag, task, run, map index) always gives the same name, so a retried or
    restarted task finds its cluster instead of creating a second one. ``max_length``
    leaves room for the role and index suffixes inside the 63-character DNS label.
    """
    digest = short_hash(dag_id, task_id, run_id, str(map_index), length=8)
    readable = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")
    head = f"{prefix}-{readable}" if readable else prefix
    head = head[: max_length - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}"


def role_resource_name(cluster: str, role: str) -> str:
    """Name of the per-role Service and Job: ``<cluster>-<role>``."""
    return f"{cluster}-{role}"


def network_policy_name(cluster: str) -> str:
    """Name of the cluster's NetworkPolicy: ``<cluster>-isolation``."""
    return f"{cluster}-isolation"


def pod_group_name(cluster: str) -> str:
    """Name of the cluster's PodGroup (``gang_scheduling: native``): ``<cluster>-gang``."""
    return f"{cluster}-gang"


def task_hostname(cluster: str, role: str, index: int, jobset: bool = False) -> str:
    """A task's pod hostname: ``<cluster>-<role>-<i>`` (Jobs layout), or JobSet's
    ``<jobset>-<replicated job>-<job index>-<pod index>`` with one Job per role."""
    return f"{cluster}-{role}-0-{index}" if jobset else f"{cluster}-{role}-{index}"


def task_address(cluster: str, role: str, index: int, namespace: str, port: int, jobset: bool = False) -> str:
    """Stable DNS address of one task through a headless Service: the role's
    (``<cluster>-<role>``), or the JobSet's one (named like the JobSet)."""
    service = cluster if jobset else role_resource_name(cluster, role)
    return f"{task_hostname(cluster, role, index, jobset)}.{service}.{namespace}.svc:{port}"


@dataclass(frozen=True, slots=True, repr=False)
class RunIdentity:
    """The Airflow task instance a cluster belongs to; becomes labels and annotations.

    Labels hold sanitised values (for selection); annotations hold the exact values.
    A value: frozen and hashable, so it can key a dict of clusters.
    """

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    def __post_init__(self) -> None:
        from airflow_tfk.core.errors import SpecError

        for field, value in (("dag_id", self.dag_id), ("task_id", self.task_id), ("run_id", self.run_id)):
            if not isinstance(value, str):
                raise SpecError(field, "must be a string", value)
            if len(value) > 250:  # Airflow's own column limit for ids
                raise SpecError(field, "must be at most 250 characters", value)
        if isinstance(self.map_index, bool) or not isinstance(self.map_index, int):
            raise SpecError("map_index", "must be an integer", self.map_index)
        if not -1 <= self.map_index <= MAP_INDEX_MAX:
            raise SpecError("map_index", f"must be between -1 and {MAP_INDEX_MAX}", self.map_index)

    def __repr__(self) -> str:
        return f"RunIdentity({self.dag_id!r}, {self.task_id!r}, {self.run_id!r}, {self.map_index})"

    def labels(self) -> dict[str, str]:
        return {
            LABEL_DAG: safe_label_value(self.dag_id),
            LABEL_TASK: safe_label_value(self.task_id),
            LABEL_RUN: safe_label_value(self.run_id),
            LABEL_MAP_INDEX: str(self.map_index) if self.map_index >= 0 else "none",
        }

    def annotations(self) -> dict[str, str]:
        return {
            ANNOTATION_DAG: self.dag_id,
            ANNOTATION_TASK: self.task_id,
            ANNOTATION_RUN: self.run_id,
            ANNOTATION_MAP_INDEX: str(self.map_index),
        }

    @classmethod
    def from_annotations(cls, annotations: dict[str, str] | None) -> RunIdentity | None:
        """The identity :meth:`annotations` recorded (None when an object carries none)."""
        ann = annotations or {}
        if not all(k in ann for k in (ANNOTATION_DAG, ANNOTATION_TASK, ANNOTATION_RUN)):
            return None
        try:
            return cls(
                ann[ANNOTATION_DAG],
                ann[ANNOTATION_TASK],
                ann[ANNOTATION_RUN],
                int(ann.get(ANNOTATION_MAP_INDEX, "-1")),
            )
        except ValueError:
            return None

    def cluster_name(self, prefix: str = NAME_PREFIX) -> str:
        return cluster_name_for(self.dag_id, self.task_id, self.run_id, self.map_index, prefix)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> RunIdentity:
        map_index = data.get("map_index", -1)
        return cls(
            str(data["dag_id"]),
            str(data["task_id"]),
            str(data["run_id"]),
            int(map_index) if isinstance(map_index, (int, str)) else -1,
        )
