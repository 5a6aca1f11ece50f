"""The sections of :class:`~airflow_tfk.spec.cluster.TFClusterSpec`: a role, the storage and its
volumes, each field declared once with :func:`~airflow_tfk.spec.decl.spec_field`."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.checks import subdomain
from airflow_tfk.spec.decl import (
    Errors,
    Form,
    check_fields,
    section_field,
    spec_field,
    str_map_field,
)
from airflow_tfk.spec.pods import PodRules
from airflow_tfk.spec.resources import Resources, Toleration, quantity_field

MAX_REPLICAS = 10_000
MAX_TOLERATIONS = 256
ROLES = ("chief", "ps", "worker", "evaluator")


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


def _command(value: Any, path: str) -> tuple[str, ...]:
    if not value:
        raise SpecError(path, "must not be empty when given")
    return tuple(value)


@dataclass(frozen=True)
class RoleSpec:
    """One role of the cluster (ps, worker, chief or evaluator)."""

    replicas: int = spec_field(
        1,
        kind="int",
        lo=1,
        roles={"worker": (1, MAX_REPLICAS), "ps": (1, 1000), "chief": (1, 1), "evaluator": (1, 1)},
        form={
            "worker": Form("workers", "Workers", "Worker replicas (one Indexed Job).", default=2),
            "ps": Form("ps", "Parameter servers", "0 for all_reduce.", default=1, minimum=0),
        },
        help="tasks of this role (workers 1-10000, PS 1-1000)",
    )
    resources: Resources = section_field(
        Resources, "requests and limits of each task", prefix="<role>.resources."
    )
    env: Mapping[str, str] = str_map_field(
        "env", help="extra environment of this role's tasks, added to `env`"
    )
    node_selector: Mapping[str, str] = str_map_field("label", help="node labels this role's pods must run on")
    tolerations: tuple[Toleration, ...] = spec_field(
        (),
        kind="sections",
        section=Toleration,
        hi=MAX_TOLERATIONS,
        prefix="<role>.tolerations[].",
        help="taints this role's pods tolerate (fields under `<role>.tolerations[].`)",
    )
    command: tuple[str, ...] | None = spec_field(
        None, kind="str_list", check=_command, help="overrides `command` for this role"
    )
    args: tuple[str, ...] | None = spec_field(None, kind="str_list", help="overrides `args` for this role")
    pod: PodRules = section_field(
        PodRules, "what this role's pods carry beyond the training, added to `pod`", prefix="[<role>.]pod."
    )

    def validate(self, where: str, lo: int = 1, hi: int = MAX_REPLICAS) -> None:
        """Check the role as the role ``where``; its bounds are the declaration's for that
        role (``lo`` and ``hi`` are kept for callers of the older signature)."""
        errors = Errors()
        check_fields(self, where, errors, where)
        errors.raise_if_any()


@dataclass(frozen=True)
class VolumeSpec:
    """One storage volume: an existing claim, or a new PVC of ``size``."""

    claim: str | None = spec_field(
        None,
        kind="str",
        check=subdomain("PVC name (DNS-1123 subdomain)"),
        help="mount this existing PersistentVolumeClaim (locally: the shared folder "
        "`<root>/<namespace>/.claims/<claim>/`)",
    )
    size: str | None = quantity_field("or create a new PVC of this size (`10Gi`), deleted with the cluster")
    storage_class: str | None = spec_field(
        None,
        kind="str",
        check=subdomain("storage class name"),
        help="storage class of this new PVC (default: `storage.storage_class`)",
    )
    access_mode: AccessMode = spec_field(
        AccessMode.RWX,
        kind="enum",
        choices=AccessMode,
        help="access mode of a new PVC; every task mounts it, so ReadWriteMany",
    )

    def _rules(self, where: str, errors: Errors) -> None:
        errors.run(lambda: self._one_source(where), f"{where}.claim", f"{where}.size")

    def _one_source(self, where: str) -> None:
        if self.claim is None and self.size is None:
            raise SpecError(where, "needs either 'claim' (existing PVC) or 'size' (new PVC)")
        if self.claim is not None and self.size is not None:
            raise SpecError(f"{where}.claim", "and 'size' are exclusive: mount a claim or create one")


def _volume(what: str) -> Any:
    return section_field(VolumeSpec, f"the {what}", prefix="storage.<volume>.", absent="none")


@dataclass(frozen=True)
class StorageSpec:
    """Data, logs and models volumes, mounted at ``/tfk/data``, ``/tfk/logs``, ``/tfk/models``."""

    data: VolumeSpec | None = _volume("data volume, mounted at `/tfk/data` (`$TFK_DATA_DIR`)")
    logs: VolumeSpec | None = _volume(
        "logs volume, mounted at `/tfk/logs` (`$TFK_LOG_DIR`; TensorBoard reads it)"
    )
    models: VolumeSpec | None = _volume(
        "models volume, mounted at `/tfk/models` (`$TFK_MODEL_DIR`; checkpoints and exported SavedModels)",
    )
    storage_class: str | None = spec_field(
        None,
        kind="str",
        check=subdomain("storage class name"),
        help="storage class of every new volume (none: the cluster's default class)",
    )

    VOLUMES = ("data", "logs", "models")
    MOUNT_ROOT = "/tfk"

    def volumes(self) -> dict[str, VolumeSpec]:
        return {n: getattr(self, n) for n in self.VOLUMES if getattr(self, n) is not None}
