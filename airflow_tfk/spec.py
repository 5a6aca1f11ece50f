"""`TFClusterSpec`: the typed, validated description of one distributed TensorFlow cluster.

Everything a DAG author or a spec file says goes through here first. Construction
validates; an invalid spec raises :class:`~airflow_tfk.errors.SpecError` naming the field
and the rule (a :class:`~airflow_tfk.errors.SpecErrors` with every error when there are
several), before any backend is touched. The module is pure: no Kubernetes client, no
TensorFlow, no template rendering.

Each field below is its own declaration (:func:`~airflow_tfk.spec_decl.spec_field`: kind,
default, bounds, help, form entry); the README's table, the UI form's Params, the training
files' JSON Schema and the checks all come from it (:mod:`airflow_tfk.spec_docs`). Adding a
field is one ``spec_field`` line here, its use in the templates, and a test.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk import naming
from airflow_tfk._spec_checks import (
    _int,  # noqa: F401 - the serving spec's integer rule
    _text,
    cluster_name,
    exit_codes,
    image_text,
    must_run,
    network_policy,
    not_reserved_labels,
    queue,
    secret_names,
)
from airflow_tfk.admission import CapacityCheck, Layout
from airflow_tfk.constants import NAMESPACE, PS_GRACE_SECONDS
from airflow_tfk.errors import SpecError
from airflow_tfk.network import TrainingNetworkPolicy
from airflow_tfk.quantity import parse_quantity, quantity_value
from airflow_tfk.spec_decl import (
    Errors,
    Form,
    check_fields,
    choice_field,
    from_mapping,
    section_field,
    spec_field,
    str_map_field,
    validate,
)
from airflow_tfk.spec_pods import PodRules, pod_rules_rules
from airflow_tfk.spec_resources import Resources, Toleration
from airflow_tfk.spec_roles import (
    MAX_REPLICAS,
    MAX_TOLERATIONS,
    ROLES,
    AccessMode,
    Mode,
    RoleSpec,
    StorageSpec,
    VolumeSpec,
    subdomain,
)
from airflow_tfk.spec_yaml import load_yaml_mapping

__all__ = [
    "MAX_REPLICAS",
    "MAX_TOLERATIONS",
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

MAX_ENV_BYTES = 256 * 1024
_YEAR = 365 * 24 * 3600
_DAY = 24 * 3600
_REQUIRED = ("name", "image", "command", "worker")


def _role(help: str) -> Any:
    return section_field(RoleSpec, help, prefix="<role>.", absent="none")


_NETWORK_SCHEMA = {"anyOf": [{"type": "boolean"}, {"type": "object"}]}


@dataclass(frozen=True)
class TFClusterSpec:
    """A distributed TensorFlow cluster: what the DAG author asks for (fields: README's
    "Every field" table, generated from the declarations below)."""

    name: str = spec_field(
        kind="str",
        check=cluster_name,
        help="cluster name, prefix of every object (DNS-1035 label); in a DAG it is derived from the dag, "
        "task, run and map index when omitted",
    )
    image: str = spec_field(
        kind="str",
        hi=1024,
        pattern=r"[^\s{}]+",
        rule="must be an image reference without spaces or braces",
        check=image_text,
        form=Form("image", "Training image"),
        help="container image of every task (the local backend does not use it)",
    )
    command: tuple[str, ...] = spec_field(
        kind="str_list",
        check=must_run,
        help='entrypoint of every task, a list (`["python", "/opt/train.py"]`)',
    )
    worker: RoleSpec = section_field(
        RoleSpec,
        "the workers: `{replicas: 3, ...}` (fields under `<role>.`)",
        prefix="<role>.",
        absent="required",
    )
    args: tuple[str, ...] = spec_field((), kind="str_list", help="arguments of every task")
    mode: Mode = spec_field(
        Mode.BETWEEN_GRAPH,
        kind="enum",
        choices=Mode,
        form=Form("mode", "Mode", default="parameter_server"),
        help="`between_graph` (TF1 replicas; success = every worker), `parameter_server` (TF2 "
        "`ParameterServerStrategy`; success = the chief), "
        "`all_reduce` (`MultiWorkerMirroredStrategy`; no PS)",
    )
    namespace: str = spec_field(
        NAMESPACE, kind="str", check=_text, hi=63, help="namespace of the cluster's objects"
    )
    namespace_per_training: bool = spec_field(
        False,
        kind="bool",
        help="create the namespace `<namespace>-<name>` for this training, deleted with it; the "
        "`image_pull_secrets` and `service_account` are copied into it from `namespace` and the "
        "LocalQueue `queue_name` is made there; an existing `storage.*.claim` is refused (a claim binds "
        "its volume to its own namespace)",
    )
    ps: RoleSpec | None = _role(
        "parameter servers; required by `between_graph` and `parameter_server`, refused by `all_reduce`"
    )
    chief: RoleSpec | None = _role("the coordinator; required by `parameter_server`; exactly one")
    evaluator: RoleSpec | None = _role("an optional side evaluator; at most one; not in the cluster map")
    port: int = spec_field(
        2222,
        kind="int",
        lo=1,
        hi=65535,
        help="the gRPC port of every task (the local backend picks free ports instead)",
    )
    storage: StorageSpec = section_field(StorageSpec, "data, logs and models volumes")
    env: Mapping[str, str] = str_map_field(
        "env", help="environment of every task (`TF_CONFIG` and `TFK_*` are reserved)"
    )
    labels: Mapping[str, str] = str_map_field(
        "label",
        check=not_reserved_labels,
        help="extra labels on every object (keys under `tfk.airflow.apache.org/`, `kubernetes.io/`, "
        "`k8s.io/` and `x-k8s.io/` and their subdomains, e.g. `app.kubernetes.io/`, `kueue.x-k8s.io/`, "
        "are reserved)",
    )
    image_pull_policy: str = choice_field("IfNotPresent", ("IfNotPresent", "Always", "Never"))
    image_pull_secrets: tuple[str, ...] = spec_field(
        (), kind="str_list", check=secret_names, help="names of Secrets to pull the image with"
    )
    service_account: str | None = spec_field(
        None,
        kind="str",
        check=subdomain("service account name"),
        help="service account of the training pods (no API token is mounted either way)",
    )
    max_duration_seconds: int | None = spec_field(
        None,
        kind="int",
        lo=1,
        hi=_YEAR,
        help="a deadline for the whole training: `activeDeadlineSeconds` on every Job (the local supervisor "
        "enforces it too); none means no deadline",
    )
    retries_per_index: int = spec_field(
        0,
        kind="int",
        lo=0,
        hi=1000,
        help="restarts of each task index (PS, worker, chief) after a failure that is not permanent "
        "(`backoffLimitPerIndex`)",
    )
    permanent_exit_codes: tuple[int, ...] = spec_field(
        (1, 2, 126, 127),
        kind="int_list",
        lo=1,
        hi=255,
        check=exit_codes,
        help="exit codes that fail the training at once, without a retry",
    )
    ps_grace_seconds: int = spec_field(
        PS_GRACE_SECONDS,
        kind="int",
        lo=0,
        hi=_DAY,
        form=Form(
            "ps_grace_seconds",
            "PS grace seconds",
            "After success, how long the parameter servers stay before they are deleted.",
        ),
        help="after success, wait this long before deleting the parameter servers (`layout: jobset` on "
        "Kubernetes: JobSet ends them at once)",
    )
    termination_grace_seconds: int = spec_field(
        60,
        kind="int",
        lo=1,
        hi=_DAY,
        help="time between SIGTERM and SIGKILL for every task (`terminationGracePeriodSeconds`; the local "
        "backend's kill grace): a TrainingApp saves a checkpoint on notice within it (see "
        "[Preemption](docs/training-app.md#preemption-eviction-and-drain))",
    )
    max_lost_workers: int = spec_field(
        0,
        kind="int",
        lo=0,
        hi=10000,
        help="`parameter_server` only: workers that may fail for good while the chief goes on with the "
        "others; one more fails the training, naming them",
    )
    legacy_tf1_flags: bool = spec_field(
        False,
        kind="bool",
        help="append `--ps_hosts --worker_hosts --job_name --task_index` to every task's args, for TF1 "
        "scripts that read their cluster from flags; in `between_graph` the command also runs behind the "
        "runtime's launcher (device filters, see below)",
    )
    ttl_seconds_after_finished: int | None = spec_field(
        7 * _DAY,
        kind="int",
        lo=0,
        hi=_YEAR,
        help="the retention: how long what the clean-up policy keeps (after success or failure) stays. "
        "Kubernetes deletes the finished Jobs (or JobSet) then (`ttlSecondsAfterFinished`; 7 days) "
        "and the orphan sweeper the rest (Services, NetworkPolicy, claims made from `size:`, the "
        "per-training namespace)",
    )
    metrics_port: int | None = spec_field(
        None,
        kind="int",
        lo=1,
        hi=65535,
        help="a port on which the training serves Prometheus metrics: declared on every task's container "
        "(`metrics`) with `prometheus.io/*` scrape annotations on the pods; none: no metrics port",
    )
    metrics_path: str = spec_field(
        "/metrics",
        kind="str",
        pattern=r"(/[A-Za-z0-9._~-]+)+",
        rule="must be an absolute URL path like /metrics",
        help="the HTTP path of those metrics",
    )
    layout: Layout = spec_field(
        Layout.JOBS,
        kind="enum",
        choices=Layout,
        help="`jobs` (a headless Service and an Indexed Job per role, PS included) or `jobset` (one JobSet, "
        "a replicated Job per role; Kueue admits it as one workload): [docs/kueue.md](docs/kueue.md)",
    )
    queue_name: str | None = spec_field(
        None,
        kind="custom",
        check=queue,
        schema={"type": "string", "maxLength": 63},
        help="a Kueue LocalQueue: the workloads are created suspended with Kueue's queue label, and the task "
        "log gives Kueue's pending reason while queued",
    )
    cluster_queue: str | None = spec_field(
        None,
        kind="str",
        check=subdomain("ClusterQueue name"),
        help="with `namespace_per_training` and `queue_name`: the Kueue ClusterQueue that the LocalQueue "
        "`queue_name` made in the new namespace points at (default: the one `queue_name` points at in "
        "`namespace`)",
    )
    capacity_check: CapacityCheck = spec_field(
        CapacityCheck.OFF,
        kind="enum",
        choices=CapacityCheck,
        help="`off`, `warn` or `fail`: before creating anything, compare the requests with the nodes' free "
        "allocatable resources; the message names the shortfall",
    )
    network_policy: TrainingNetworkPolicy = spec_field(
        factory=TrainingNetworkPolicy,
        kind="custom",
        check=network_policy,
        section=TrainingNetworkPolicy,
        prefix="network_policy.",
        schema=_NETWORK_SCHEMA,
        help="the cluster's NetworkPolicy",
    )

    pod: PodRules = section_field(
        PodRules,
        "what every pod carries beyond the training (each role's `<role>.pod` adds to it)",
        prefix="[<role>.]pod.",
    )
    template_dir: str | None = spec_field(
        None,
        kind="str",
        check=_text,
        hi=4096,
        help="a directory of templates overriding the built-ins of the same name (`job.yaml.j2`, "
        "`_macros.yaml.j2`...), rendered in the same sandbox; a training file's relative path is "
        "relative to the file",
    )

    def __post_init__(self) -> None:
        validate(self)

    # -- rules that join fields: each skipped when a field it reads is already wrong ------
    def _rules(self, where: str, errors: Errors) -> None:
        errors.run(self._namespace, "name", "namespace", "namespace_per_training")
        errors.run(self._own_namespace, "namespace_per_training", "storage", "queue_name", "cluster_queue")
        errors.run(self._env, "env", *(f"{r}.env" for r in ROLES))
        errors.run(self._mode_roles, "mode", *ROLES, "storage")
        errors.run(self._lost_workers, "max_lost_workers", "mode", "worker")
        errors.run(self._metrics, "metrics_port", "port", "network_policy")
        errors.run(self._generated_names, "name", "layout", "storage", *ROLES)
        pod_rules_rules(self, errors)

    def _namespace(self) -> None:
        # checked as created: with namespace_per_training that is '<namespace>-<name>'
        if not naming.is_dns1123_label(self.namespace_name):
            raise SpecError(
                "namespace",
                "must be a DNS-1123 label (the per-training namespace is '<namespace>-<name>')",
                self.namespace_name,
            )

    def _own_namespace(self) -> None:
        """What a training's own namespace can hold. Pull secrets, the ServiceAccount and
        the LocalQueue are copied into it (or made) when it is created; an existing claim
        cannot be: a PVC is bound to its PV one-to-one, so the PV would have to leave the
        claim (and the namespace) that holds it, which may be another training's or the
        data's owner's. A claim of the training's own (``size:``) is made in it."""
        if self.cluster_queue is not None and not (self.namespace_per_training and self.queue_name):
            raise SpecError(
                "cluster_queue",
                "needs namespace_per_training and queue_name: it is what the LocalQueue made "
                "in the training's own namespace points at",
                self.cluster_queue,
            )
        if not self.namespace_per_training:
            return
        for vol, spec in self.storage.volumes().items():
            if spec.claim is not None:
                raise SpecError(
                    f"storage.{vol}.claim",
                    "cannot be used with namespace_per_training: a claim lives in its own "
                    f"namespace ({self.namespace}) and binds its volume to it alone; give "
                    f"storage.{vol}.size for a claim made in the training's namespace, or set "
                    "namespace_per_training: false",
                    spec.claim,
                )

    def _env(self) -> None:
        # Every pod carries the env: far below the API server's object size limit, checked
        # here so an oversized env fails in microseconds, not after rendering it.
        total = sum(len(k) + len(v) for k, v in self.env.items())
        if total > MAX_ENV_BYTES:
            raise SpecError("env", f"totals {total} characters, over the {MAX_ENV_BYTES} a pod may carry")
        for where, env in (("env", self.env), *((f"{r}.env", rs.env) for r, rs in self.roles().items())):
            reserved = sorted(k for k in env if k.startswith("TFK_") or k == "TF_CONFIG")
            if reserved:
                raise SpecError(f"{where}.{reserved[0]}", "is reserved for the platform")

    def _mode_roles(self) -> None:
        mode = self.mode
        if mode is Mode.PARAMETER_SERVER:
            if self.chief is None:
                raise SpecError(
                    "chief", "is required when mode is parameter_server (the chief coordinates training)"
                )
            if self.ps is None:
                raise SpecError("ps", "is required when mode is parameter_server")
            self._shared_checkpoints()
        elif mode is Mode.BETWEEN_GRAPH:
            if self.ps is None:
                raise SpecError("ps", "is required when mode is between_graph")
        elif mode is Mode.ALL_REDUCE and self.ps is not None:
            raise SpecError("ps", "must be omitted when mode is all_reduce (there are no parameter servers)")

    def _shared_checkpoints(self) -> None:
        models = self.storage.models
        # Found on a real node: the chief's checkpoint save runs on the PS (SaveV2 on
        # /job:ps), so the checkpoint directory ($TFK_MODEL_DIR) must be one volume that
        # the chief and every PS mount; a per-pod (ReadWriteOnce) claim fails the first save.
        if models is not None and models.claim is None and models.access_mode is not AccessMode.RWX:
            raise SpecError(
                "storage.models.access_mode",
                "must be ReadWriteMany when mode is parameter_server: the parameter servers "
                "write the chief's checkpoints, so the chief and every PS share the models volume",
                models.access_mode.value,
            )

    def _lost_workers(self) -> None:
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

    def _metrics(self) -> None:
        if self.metrics_port is not None and self.metrics_port == self.port:
            raise SpecError("metrics_port", f"must differ from port ({self.port})", self.metrics_port)
        if self.network_policy.metrics_from and self.metrics_port is None:
            raise SpecError(
                "network_policy.metrics_from", "needs metrics_port (the port it admits scrapers to)"
            )

    def _generated_names(self) -> None:
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
        """Build from plain data (a parsed spec file or DAG params); unknown keys are errors.
        Every error is reported at once (:class:`~airflow_tfk.errors.SpecErrors`)."""
        errors = Errors()
        if isinstance(data, Mapping):
            # An empty required field is a missing one, whatever its kind.
            data = {k: (None if k in _REQUIRED and v in ("", [], ()) else v) for k, v in data.items()}
        spec: TFClusterSpec = from_mapping(cls, data, "", errors)
        check_fields(spec, "", errors)
        errors.raise_if_any()
        return spec

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
