"""`TFClusterSpec`: the typed, validated description of one distributed TensorFlow cluster.

Everything a DAG author or a spec file says goes through here first. Construction
validates; an invalid spec raises :class:`~airflow_tfk.core.errors.SpecError` naming the field
and the rule (a :class:`~airflow_tfk.core.errors.SpecErrors` with every error when there are
several), before any backend is touched. The module is pure: no Kubernetes client, no
TensorFlow, no template rendering.

Each field below is its own declaration (:func:`~airflow_tfk.spec.decl.spec_field`: kind,
default, bounds, help, form entry); the README's table, the UI form's Params, the training
files' JSON Schema and the checks all come from it (:mod:`airflow_tfk.dagfactory.spec_docs`). Adding a
field is one ``spec_field`` line here, its use in the templates, and a test. The rules
that join several fields are in :mod:`airflow_tfk.spec.rules`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core.constants import NAMESPACE, PS_GRACE_SECONDS
from airflow_tfk.core.quantity import parse_quantity, quantity_value
from airflow_tfk.spec.admission import CapacityCheck, GangScheduling, Layout
from airflow_tfk.spec.budget import BudgetSpec
from airflow_tfk.spec.checks import (
    _int,  # noqa: F401 - the serving spec's integer rule
    _local_dir,
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
from airflow_tfk.spec.decl import (
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
from airflow_tfk.spec.network import TrainingNetworkPolicy
from airflow_tfk.spec.placement import PlacementSpec
from airflow_tfk.spec.pods import PodRules
from airflow_tfk.spec.resources import Resources, Toleration
from airflow_tfk.spec.roles import (
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
from airflow_tfk.spec.rules import cluster_rules
from airflow_tfk.spec.yaml_reader import load_yaml_mapping

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
        help="create the namespace `<namespace>-<name>` for this training, deleted with it, enforcing "
        "the `restricted` Pod Security level (its `pod-security.kubernetes.io` labels); the "
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
        "(`metrics`) with `prometheus.io/*` scrape annotations on the pods (the local backend gives each "
        "task a free port of its own instead); none: no metrics port",
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
    gang_scheduling: GangScheduling = spec_field(
        GangScheduling.NONE,
        kind="enum",
        choices=GangScheduling,
        help="`none` or `native`: every task starts together or none does, by Kubernetes' own gang "
        "scheduling (1.37+, the `GenericWorkload` gate and the `scheduling.k8s.io/v1beta1` API; "
        "checked before anything is created): [docs/gang-scheduling.md](docs/gang-scheduling.md)",
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
    budget: BudgetSpec | None = section_field(
        BudgetSpec,
        "a cap on requested core-hours or cost, acted on when the projection at completion "
        "crosses it: [docs/operators.md](docs/operators.md#budgets)",
        absent="none",
    )
    placement: PlacementSpec | None = section_field(
        PlacementSpec,
        "every pod in one topology domain (a node label's value: a rack, a zone), checked to fit "
        "before anything is created: [docs/pod-rules.md](docs/pod-rules.md#one-topology-domain)",
        absent="none",
    )
    template_dir: str | None = spec_field(
        None,
        kind="str",
        check=_local_dir,
        hi=4096,
        help="a directory of templates overriding the built-ins of the same name (`job.yaml.j2`, "
        "`_macros.yaml.j2`...), rendered in the same sandbox; a training file's relative path is "
        "relative to the file",
    )

    def __post_init__(self) -> None:
        validate(self)

    # -- rules that join fields: each skipped when a field it reads is already wrong ------
    def _rules(self, where: str, errors: Errors) -> None:
        cluster_rules(self, errors)

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
        Every error is reported at once (:class:`~airflow_tfk.core.errors.SpecErrors`)."""
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
