"""`TFClusterSpec`: the typed, validated description of one distributed TensorFlow cluster.

Everything a DAG author or a spec file says goes through here first. Construction
validates; an invalid spec raises :class:`~airflow_tfk.errors.SpecError` naming the field
and the rule, before any backend is touched. The module is pure: no Kubernetes client,
no TensorFlow, no template rendering.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk import admission, naming
from airflow_tfk._spec_checks import (
    _bounded,
    _fields,
    _int,
    _name,
    _reject_unknown,
    _str_list,
    _str_map,
    _text,
    reserved_label,
)
from airflow_tfk.admission import CapacityCheck, Layout
from airflow_tfk.errors import SpecError
from airflow_tfk.network import TrainingNetworkPolicy
from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED
from airflow_tfk.quantity import parse_quantity, quantity_value
from airflow_tfk.spec_resources import Resources, Toleration
from airflow_tfk.spec_yaml import load_yaml_mapping

__all__ = [
    "MAX_REPLICAS",
    "ROLES",
    "AccessMode",
    "Mode",
    "Resources",
    "RoleSpec",
    "StorageSpec",
    "TFClusterSpec",
    "Toleration",
    "VolumeSpec",
    "load_yaml_mapping",
    "parse_quantity",
    "quantity_value",
]

MAX_REPLICAS = 10_000
MAX_ENV_BYTES = 256 * 1024
MAX_TOLERATIONS = 256
ROLES = ("chief", "ps", "worker", "evaluator")


#: the name rules as the errors say them
_DNS1035 = "a DNS-1035 label: lowercase letters, digits and '-', starting with a letter"
_DNS1123_NAMESPACE = "a DNS-1123 label (the per-training namespace is '<namespace>-<name>')"


class Mode(str, enum.Enum):
    """How the cluster trains, and therefore what success means.

    - ``between_graph``: TF1-style replicas; success = every worker succeeded; PS never
      exit and are deleted after the grace period.
    - ``parameter_server``: TF2 ``ParameterServerStrategy``; success = the chief succeeded.
    - ``all_reduce``: ``MultiWorkerMirroredStrategy``; success = every worker succeeded; no PS.
    """

    BETWEEN_GRAPH = "between_graph"
    PARAMETER_SERVER = "parameter_server"
    ALL_REDUCE = "all_reduce"


class AccessMode(str, enum.Enum):
    """A PVC's access mode, by its Kubernetes name; what the cluster's storage class
    supports decides which one a training's claims can use."""

    RWX = "ReadWriteMany"
    RWO = "ReadWriteOnce"
    ROX = "ReadOnlyMany"
    RWOP = "ReadWriteOncePod"


@dataclass(frozen=True)
class RoleSpec:
    """One role of the cluster (ps, worker, chief or evaluator).

    :param replicas: number of tasks of this role.
    :param resources: requests and limits of each task.
    :param env: extra environment of this role's tasks (added to the cluster-wide env).
    :param node_selector: node labels the tasks must run on.
    :param tolerations: taints the tasks tolerate.
    :param command: overrides the cluster's command for this role.
    :param args: overrides the cluster's args for this role.
    """

    replicas: int = 1
    resources: Resources = field(default_factory=Resources)
    env: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None

    def validate(self, where: str, lo: int, hi: int) -> None:
        _int(self.replicas, f"{where}.replicas", lo, hi)
        # The Python API may pass plain mappings where the YAML path builds the classes.
        if self.resources is None or isinstance(self.resources, Mapping):
            object.__setattr__(self, "resources", Resources.from_dict(self.resources, f"{where}.resources"))
        if not isinstance(self.resources, Resources):
            raise SpecError(f"{where}.resources", "must be a mapping such as {cpu: '1'}", self.resources)
        self.resources.validate(f"{where}.resources")
        tols = self.tolerations
        if tols is None:
            tols = ()
        if isinstance(tols, (str, bytes, Mapping)) or not isinstance(tols, Sequence):
            raise SpecError(f"{where}.tolerations", "must be a list", tols)
        _bounded(tols, f"{where}.tolerations", MAX_TOLERATIONS)
        coerced = []
        for i, t in enumerate(tols):
            if isinstance(t, Mapping):
                _reject_unknown(t, _fields(Toleration), f"{where}.tolerations[{i}]")
                t = Toleration(**t)
            if not isinstance(t, Toleration):
                raise SpecError(f"{where}.tolerations[{i}]", "must be a mapping", t)
            coerced.append(t)
        object.__setattr__(self, "tolerations", tuple(coerced))
        object.__setattr__(self, "env", _str_map(self.env, f"{where}.env", keys="env"))
        object.__setattr__(
            self, "node_selector", _str_map(self.node_selector, f"{where}.node_selector", keys="label")
        )
        for i, t in enumerate(self.tolerations):
            t.validate(f"{where}.tolerations[{i}]")
        if self.command is not None:
            object.__setattr__(self, "command", _str_list(self.command, f"{where}.command"))
            if not self.command:
                raise SpecError(f"{where}.command", "must not be empty when given")
        if self.args is not None:
            object.__setattr__(self, "args", _str_list(self.args, f"{where}.args"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str) -> RoleSpec | None:
        if data is None:
            return None
        if isinstance(data, RoleSpec):
            return data
        _reject_unknown(data, _fields(cls), where)
        kwargs = dict(data)
        kwargs["resources"] = Resources.from_dict(kwargs.get("resources"), f"{where}.resources")
        tolerations = kwargs.get("tolerations") or []
        if not isinstance(tolerations, Sequence) or isinstance(tolerations, str):
            raise SpecError(f"{where}.tolerations", "must be a list", tolerations)
        _bounded(tolerations, f"{where}.tolerations", MAX_TOLERATIONS)
        tols = []
        for i, t in enumerate(tolerations):
            _reject_unknown(t, _fields(Toleration), f"{where}.tolerations[{i}]")
            tols.append(Toleration(**t))
        kwargs["tolerations"] = tuple(tols)
        return cls(**kwargs)


@dataclass(frozen=True)
class VolumeSpec:
    """One storage volume: an existing claim, or a new PVC of ``size``.

    :param claim: name of an existing PersistentVolumeClaim to mount.
    :param size: size of a new PVC, e.g. ``10Gi`` (ignored when ``claim`` is given).
    :param storage_class: storage class of a new PVC (default: the storage section's).
    :param access_mode: access mode of a new PVC; RWX so every task can mount it.
    """

    claim: str | None = None
    size: str | None = None
    storage_class: str | None = None
    access_mode: AccessMode = AccessMode.RWX

    def validate(self, where: str) -> None:
        if self.claim is None and self.size is None:
            raise SpecError(where, "needs either 'claim' (existing PVC) or 'size' (new PVC)")
        if self.claim is not None and self.size is not None:
            raise SpecError(f"{where}.claim", "and 'size' are exclusive: mount a claim or create one")
        if self.claim is not None and not (
            isinstance(self.claim, str) and naming.is_dns1123_subdomain(self.claim)
        ):
            raise SpecError(f"{where}.claim", "is not a valid PVC name (DNS-1123 subdomain)", self.claim)
        if self.size is not None:
            object.__setattr__(self, "size", parse_quantity(self.size, f"{where}.size"))
        if self.storage_class is not None and not (
            isinstance(self.storage_class, str) and naming.is_dns1123_subdomain(self.storage_class)
        ):
            raise SpecError(f"{where}.storage_class", "is not a valid storage class name", self.storage_class)
        try:
            object.__setattr__(self, "access_mode", AccessMode(self.access_mode))
        except ValueError:
            raise SpecError(
                f"{where}.access_mode",
                f"must be one of {', '.join(m.value for m in AccessMode)}",
                self.access_mode,
            ) from None


@dataclass(frozen=True)
class StorageSpec:
    """Data, logs and models volumes, mounted at ``/tfk/data``, ``/tfk/logs``, ``/tfk/models``.

    :param storage_class: default storage class of every new PVC.
    """

    data: VolumeSpec | None = None
    logs: VolumeSpec | None = None
    models: VolumeSpec | None = None
    storage_class: str | None = None

    VOLUMES = ("data", "logs", "models")
    MOUNT_ROOT = "/tfk"

    def validate(self, where: str) -> None:
        if self.storage_class is not None and not (
            isinstance(self.storage_class, str) and naming.is_dns1123_subdomain(self.storage_class)
        ):
            raise SpecError(f"{where}.storage_class", "is not a valid storage class name", self.storage_class)
        for name in self.VOLUMES:
            vol = getattr(self, name)
            if isinstance(vol, Mapping):
                _reject_unknown(vol, _fields(VolumeSpec), f"{where}.{name}")
                vol = VolumeSpec(**vol)
                object.__setattr__(self, name, vol)
            if vol is not None and not isinstance(vol, VolumeSpec):
                raise SpecError(f"{where}.{name}", "must be a mapping such as {size: 10Gi}", vol)
            if vol is not None:
                vol.validate(f"{where}.{name}")

    def volumes(self) -> dict[str, VolumeSpec]:
        return {n: getattr(self, n) for n in self.VOLUMES if getattr(self, n) is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str) -> StorageSpec:
        if data is None:
            return cls()
        if isinstance(data, StorageSpec):
            return data
        _reject_unknown(data, [f for f in _fields(cls)], where)
        kwargs: dict[str, Any] = {"storage_class": data.get("storage_class")}
        for name in cls.VOLUMES:
            vol = data.get(name)
            if vol is not None:
                kwargs[name] = vol  # validate() checks and builds the VolumeSpec
        return cls(**kwargs)


@dataclass(frozen=True)
class TFClusterSpec:
    """A distributed TensorFlow cluster: what the DAG author asks for.

    :param name: cluster name; prefix of every object (DNS-1035 label).
    :param image: container image of every task.
    :param command: entrypoint of every task (a role may override it).
    :param args: arguments of every task (a role may override them).
    :param mode: ``between_graph`` | ``parameter_server`` | ``all_reduce``.
    :param namespace: namespace of the cluster's objects.
    :param namespace_per_training: create and use the namespace ``<namespace>-<name>``,
        deleted with the cluster.
    :param ps: parameter servers; required by ``between_graph`` and ``parameter_server``.
    :param worker: workers.
    :param chief: the coordinator; required by ``parameter_server`` (exactly one).
    :param evaluator: an optional side-car evaluator (at most one).
    :param port: the gRPC port of every task.
    :param metrics_port: a port on which the training process serves Prometheus metrics:
        declared on every task's container (``metrics``) with ``prometheus.io/*`` scrape
        annotations on the pods. None (default): no metrics port.
    :param metrics_path: the HTTP path of those metrics.
    :param storage: data, logs and models volumes.
    :param env: environment of every task.
    :param labels: extra labels on every object.
    :param image_pull_policy: ``IfNotPresent`` | ``Always`` | ``Never``.
    :param image_pull_secrets: names of Secrets to pull the image.
    :param service_account: service account of the tasks (no token is mounted).
    :param max_duration_seconds: cluster-side deadline (``activeDeadlineSeconds``) of every
        Job, the parameter servers' included: Kubernetes stops them even if Airflow is gone.
    :param ttl_seconds_after_finished: finished Jobs are deleted by Kubernetes after this
        many seconds (``ttlSecondsAfterFinished``); None keeps them until deleted.
    :param retries_per_index: retries of each task index, PS included (``backoffLimitPerIndex``).
    :param permanent_exit_codes: exit codes that fail the task at once, without retry.
    :param ps_grace_seconds: wait after success before the PS are deleted.
    :param termination_grace_seconds: time between SIGTERM and SIGKILL when a task is
        preempted, evicted, drained or deleted (the pods' ``terminationGracePeriodSeconds``,
        the local backend's kill grace): long enough to save a checkpoint on notice.
    :param max_lost_workers: ``parameter_server`` only: how many workers may fail for good
        while the chief goes on with the others; one more fails the training.
    :param legacy_tf1_flags: pass ``--ps_hosts --worker_hosts --job_name --task_index``.
    :param layout: ``jobs`` (a headless Service and an Indexed Job per role) or ``jobset`` (one
        JobSet, admitted by Kueue as one workload); see :mod:`airflow_tfk.admission`.
    :param queue_name: Kueue LocalQueue: the workloads are created suspended, with Kueue's
        queue label, and start when Kueue admits them.
    :param capacity_check: before creating anything, compare the cluster's requests with
        the nodes' free allocatable resources: ``off``, ``warn`` or ``fail``.
    :param network_policy: the cluster's NetworkPolicy (on by default; ``false`` switches
        it off): see :class:`~airflow_tfk.network.TrainingNetworkPolicy`.
    """

    name: str
    image: str
    command: tuple[str, ...]
    worker: RoleSpec
    args: tuple[str, ...] = ()
    mode: Mode = Mode.BETWEEN_GRAPH
    namespace: str = "default"
    namespace_per_training: bool = False
    ps: RoleSpec | None = None
    chief: RoleSpec | None = None
    evaluator: RoleSpec | None = None
    port: int = 2222
    storage: StorageSpec = field(default_factory=StorageSpec)
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    max_duration_seconds: int | None = None
    retries_per_index: int = 0
    permanent_exit_codes: tuple[int, ...] = (1, 2, 126, 127)
    ps_grace_seconds: int = 30
    termination_grace_seconds: int = 60
    max_lost_workers: int = 0
    legacy_tf1_flags: bool = False
    ttl_seconds_after_finished: int | None = 7 * 24 * 3600
    metrics_port: int | None = None
    metrics_path: str = "/metrics"
    layout: Layout = Layout.JOBS
    queue_name: str | None = None
    capacity_check: CapacityCheck = CapacityCheck.OFF
    network_policy: TrainingNetworkPolicy = field(default_factory=TrainingNetworkPolicy)

    def __post_init__(self) -> None:
        self._validate()

    # -- validation -----------------------------------------------------------------
    def _validate(self) -> None:
        self._validate_identity()
        self._validate_storage()  # before the roles: parameter_server checks the models volume
        self._validate_roles()
        _int(self.port, "port", 1, 65535)
        self._validate_metrics_port()
        self._validate_env_and_labels()
        self._validate_pod_settings()
        self._validate_policies()
        self._validate_admission()
        self._validate_generated_names()

    def _validate_identity(self) -> None:
        _text(self.name, "name", max_len=63)
        _name(self.name, "name", naming.is_dns1035_label, _DNS1035)
        _text(self.image, "image", max_len=1024)
        if any(c.isspace() for c in self.image) or "{" in self.image or "}" in self.image:
            raise SpecError("image", "must be an image reference without spaces or braces", self.image)
        object.__setattr__(self, "command", _str_list(self.command, "command"))
        if not self.command:
            raise SpecError("command", "must not be empty: which program does each task run?")
        object.__setattr__(self, "args", _str_list(self.args, "args"))
        try:
            object.__setattr__(self, "mode", Mode(self.mode))
        except ValueError:
            raise SpecError("mode", f"must be one of {', '.join(m.value for m in Mode)}", self.mode) from None
        if not isinstance(self.namespace_per_training, bool):
            raise SpecError("namespace_per_training", "must be true or false", self.namespace_per_training)
        _text(self.namespace, "namespace", max_len=63)
        # checked as created: with namespace_per_training that is '<namespace>-<name>'
        _name(self.namespace_name, "namespace", naming.is_dns1123_label, _DNS1123_NAMESPACE)

    def _validate_storage(self) -> None:
        if self.storage is None or isinstance(self.storage, Mapping):
            object.__setattr__(self, "storage", StorageSpec.from_dict(self.storage, "storage"))
        if not isinstance(self.storage, StorageSpec):
            raise SpecError("storage", "must be a storage section", self.storage)
        self.storage.validate("storage")

    def _validate_env_and_labels(self) -> None:
        object.__setattr__(self, "env", _str_map(self.env, "env", keys="env"))
        # Every pod carries the env: far below the API server's object size limit, checked
        # here so an oversized env fails in microseconds, not after rendering it.
        total = sum(len(k) + len(v) for k, v in self.env.items())
        if total > MAX_ENV_BYTES:
            raise SpecError("env", f"totals {total} characters, over the {MAX_ENV_BYTES} a pod may carry")
        for where, env in (("env", self.env), *((f"{r}.env", rs.env) for r, rs in self.roles().items())):
            reserved = sorted(k for k in env if k.startswith("TFK_") or k == "TF_CONFIG")
            if reserved:
                raise SpecError(f"{where}.{reserved[0]}", "is reserved for the platform")
        object.__setattr__(self, "labels", _str_map(self.labels, "labels", keys="label"))
        for key in sorted(self.labels):
            why = reserved_label(key)
            if why:
                raise SpecError(f"labels.{key}", why)

    def _validate_pod_settings(self) -> None:
        if self.image_pull_policy not in ("IfNotPresent", "Always", "Never"):
            raise SpecError(
                "image_pull_policy", "must be IfNotPresent, Always or Never", self.image_pull_policy
            )
        object.__setattr__(
            self, "image_pull_secrets", _str_list(self.image_pull_secrets, "image_pull_secrets")
        )
        for i, secret in enumerate(self.image_pull_secrets):
            if not naming.is_dns1123_subdomain(secret):
                raise SpecError(f"image_pull_secrets[{i}]", "is not a valid Secret name", secret)
        if self.service_account is not None and not (
            isinstance(self.service_account, str) and naming.is_dns1123_subdomain(self.service_account)
        ):
            raise SpecError("service_account", "is not a valid service account name", self.service_account)

    def _validate_policies(self) -> None:
        if self.max_duration_seconds is not None:
            _int(self.max_duration_seconds, "max_duration_seconds", 1, 365 * 24 * 3600)
        if self.ttl_seconds_after_finished is not None:
            _int(self.ttl_seconds_after_finished, "ttl_seconds_after_finished", 0, 365 * 24 * 3600)
        _int(self.retries_per_index, "retries_per_index", 0, 1000)
        codes = self.permanent_exit_codes
        if isinstance(codes, (str, bytes)) or not isinstance(codes, Sequence):
            raise SpecError("permanent_exit_codes", "must be a list of integers", codes)
        _bounded(codes, "permanent_exit_codes", 255)
        for i, code in enumerate(codes):
            _int(code, f"permanent_exit_codes[{i}]", 1, 255)
        object.__setattr__(self, "permanent_exit_codes", tuple(sorted(set(codes))))
        _int(self.ps_grace_seconds, "ps_grace_seconds", 0, 24 * 3600)
        _int(self.termination_grace_seconds, "termination_grace_seconds", 1, 24 * 3600)
        if EXIT_PREEMPTED in self.permanent_exit_codes:
            raise SpecError(
                "permanent_exit_codes",
                f"must not contain {EXIT_PREEMPTED}: the exit code of a task stopped on notice "
                "after a checkpoint, which is always restarted",
                list(self.permanent_exit_codes),
            )
        self._validate_lost_workers()
        if not isinstance(self.legacy_tf1_flags, bool):
            raise SpecError("legacy_tf1_flags", "must be true or false", self.legacy_tf1_flags)

    def _validate_lost_workers(self) -> None:
        _int(self.max_lost_workers, "max_lost_workers", 0, 10000)
        if not self.max_lost_workers:
            return
        if self.mode is not Mode.PARAMETER_SERVER:
            raise SpecError(
                "max_lost_workers",
                "applies to parameter_server mode only (the other modes need every worker)",
                self.max_lost_workers,
            )
        if self.max_lost_workers >= self.worker.replicas:
            raise SpecError(
                "max_lost_workers",
                f"must be less than worker.replicas ({self.worker.replicas}): one worker must be left",
                self.max_lost_workers,
            )

    def _validate_admission(self) -> None:
        """Network isolation, layout and admission options (airflow_tfk.network, .admission)."""
        object.__setattr__(self, "network_policy", TrainingNetworkPolicy.from_value(self.network_policy))
        if self.network_policy.metrics_from and self.metrics_port is None:
            raise SpecError(
                "network_policy.metrics_from", "needs metrics_port (the port it admits scrapers to)"
            )
        object.__setattr__(self, "layout", admission.layout(self.layout))
        object.__setattr__(self, "queue_name", admission.queue_name(self.queue_name))
        object.__setattr__(self, "capacity_check", admission.capacity_check(self.capacity_check))

    def _validate_metrics_port(self) -> None:
        if self.metrics_port is not None:
            _int(self.metrics_port, "metrics_port", 1, 65535)
            if self.metrics_port == self.port:
                raise SpecError("metrics_port", f"must differ from port ({self.port})", self.metrics_port)
        if not isinstance(self.metrics_path, str) or not re.fullmatch(
            r"^(/[A-Za-z0-9._~-]+)+$", self.metrics_path
        ):
            raise SpecError("metrics_path", "must be an absolute URL path like /metrics", self.metrics_path)

    def _coerce_roles(self) -> None:
        for role in ROLES:
            spec = getattr(self, role)
            if isinstance(spec, Mapping):
                spec = RoleSpec.from_dict(spec, role)
                object.__setattr__(self, role, spec)
            if spec is not None and not isinstance(spec, RoleSpec):
                raise SpecError(role, "must be a role section such as {replicas: 2}", spec)

    def _validate_roles(self) -> None:
        self._coerce_roles()
        if self.worker is None:
            raise SpecError("worker", "is required")
        self.worker.validate("worker", 1, MAX_REPLICAS)
        if self.ps is not None:
            self.ps.validate("ps", 1, 1000)
        if self.chief is not None:
            self.chief.validate("chief", 1, 1)
        if self.evaluator is not None:
            self.evaluator.validate("evaluator", 1, 1)
        self._validate_mode_roles()

    def _validate_mode_roles(self) -> None:
        mode = self.mode
        if mode is Mode.PARAMETER_SERVER:
            if self.chief is None:
                raise SpecError(
                    "chief", "is required when mode is parameter_server (the chief coordinates training)"
                )
            if self.ps is None:
                raise SpecError("ps", "is required when mode is parameter_server")
            self._validate_shared_checkpoints()
        elif mode is Mode.BETWEEN_GRAPH:
            if self.ps is None:
                raise SpecError("ps", "is required when mode is between_graph")
        elif mode is Mode.ALL_REDUCE and self.ps is not None:
            raise SpecError("ps", "must be omitted when mode is all_reduce (there are no parameter servers)")

    def _validate_shared_checkpoints(self) -> None:
        models = self.storage.models
        # Found on a real node: the chief's checkpoint save runs on the PS (SaveV2 on
        # /job:ps), so the checkpoint directory ($TFK_MODEL_DIR) must be one volume that
        # the chief and every PS mount; a per-pod (ReadWriteOnce) claim fails the first save.
        access = getattr(models, "access_mode", None)
        access = getattr(access, "value", access)  # the storage section is coerced later
        if isinstance(models, VolumeSpec) and models.claim is None and access != AccessMode.RWX.value:
            raise SpecError(
                "storage.models.access_mode",
                "must be ReadWriteMany when mode is parameter_server: the parameter servers "
                "write the chief's checkpoints, so the chief and every PS share the models volume",
                access,
            )

    def _validate_generated_names(self) -> None:
        """Check the longest name that will be generated, not just the one given."""
        for role, spec in self.roles().items():
            longest = naming.task_hostname(self.name, role, spec.replicas - 1, self.layout is Layout.JOBSET)
            if len(longest) > naming.DNS1123_LABEL_MAX:
                raise SpecError(
                    "name",
                    f"is too long: task hostname '{longest}' would exceed "
                    f"{naming.DNS1123_LABEL_MAX} characters",
                    self.name,
                )
        for vol in self.storage.volumes():
            pvc = f"{self.name}-{vol}"
            if not naming.is_dns1123_subdomain(pvc):
                raise SpecError("name", f"gives an invalid PVC name '{pvc}'", self.name)

    # -- derived views ----------------------------------------------------------------
    @property
    def namespace_name(self) -> str:
        """The namespace the objects live in."""
        return f"{self.namespace}-{self.name}" if self.namespace_per_training else self.namespace

    def roles(self) -> dict[str, RoleSpec]:
        """Roles present, in a stable order (chief, ps, worker, evaluator)."""
        return {r: getattr(self, r) for r in ROLES if getattr(self, r) is not None}

    def task_count(self) -> int:
        return sum(r.replicas for r in self.roles().values())

    def cluster_roles(self) -> dict[str, RoleSpec]:
        """Roles that appear in TensorFlow's cluster map (the evaluator does not)."""
        return {r: s for r, s in self.roles().items() if r != "evaluator"}

    def with_name(self, name: str) -> TFClusterSpec:
        return dataclasses.replace(self, name=name)

    def fingerprint(self) -> str:
        """A short hash of everything the spec says: equal specs, equal fingerprints.

        Carried by the cluster (``spec-hash`` annotation, local state), so a re-run of the
        same task instance with other parameters replaces the cluster instead of
        reattaching to one made from another spec.
        """
        import hashlib
        import json

        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # -- construction from plain data -------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TFClusterSpec:
        """Build from plain data (a parsed spec file or DAG params); unknown keys are errors."""
        _reject_unknown(data, _fields(cls), "")
        kwargs = dict(data)
        for required in ("name", "image", "command", "worker"):
            if kwargs.get(required) in (None, "", []):
                raise SpecError(required, "is required")
        for role in ROLES:
            if role in kwargs:
                kwargs[role] = RoleSpec.from_dict(kwargs[role], role)
        kwargs["storage"] = StorageSpec.from_dict(kwargs.get("storage"), "storage")
        for key in ("command", "args", "image_pull_secrets", "permanent_exit_codes"):
            if key in kwargs and isinstance(kwargs[key], list):
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, text: str) -> TFClusterSpec:
        """Parse a spec file. Malformed YAML is a :class:`SpecError` on the field ``spec``."""
        return cls.from_dict(load_yaml_mapping(text))

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-serialisable form (round-trips through :meth:`from_dict`)."""

        def plain(value: Any) -> Any:
            if isinstance(value, enum.Enum):
                return value.value
            if dataclasses.is_dataclass(value):
                return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
            if isinstance(value, Mapping):
                return {k: plain(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            return value

        return plain(self)
