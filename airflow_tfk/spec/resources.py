"""Per-task resources and tolerations of a role: parts of :class:`TFClusterSpec`."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.quantity import parse_quantity, quantity_value
from airflow_tfk.spec.checks import _check_gpu_resource
from airflow_tfk.spec.decl import Errors, check_fields, choice_field, section_from, spec_field

QUANTITY = {"type": ["string", "number"]}


def quantity_field(help: str) -> Any:
    """A Kubernetes quantity (``500m``, ``2Gi``), none when left out."""
    return spec_field(None, kind="custom", check=parse_quantity, schema=QUANTITY, help=help)


def _gpu_resource(value: Any, path: str) -> str:
    _check_gpu_resource(value, path)
    return str(value)


def _label_key(value: Any, path: str) -> str:
    if not isinstance(value, str) or not naming.is_label_key(value):
        raise SpecError(path, "is not a valid label key", value)
    return str(value)


def _label_value(value: Any, path: str) -> str:
    if not isinstance(value, str) or not naming.is_label_value(value):
        raise SpecError(
            path, "must be a string that is a valid label value (quote numbers and booleans)", value
        )
    return str(value)


@dataclass(frozen=True)
class Resources:
    """CPU, memory and GPUs of one task, as Kubernetes quantities."""

    cpu: str | None = quantity_field('CPU request (`"500m"`, `"2"`)')
    memory: str | None = quantity_field(
        "memory request (`4Gi`); also the memory limit unless `memory_limit` is set"
    )
    cpu_limit: str | None = quantity_field("CPU limit")
    memory_limit: str | None = quantity_field("memory limit (default: the memory request)")
    gpus: int = spec_field(0, kind="int", lo=0, hi=64, help="GPUs per task, as a limit on `gpu_resource`")
    gpu_resource: str = spec_field(
        "nvidia.com/gpu", kind="str", check=_gpu_resource, help="the extended resource name of a GPU"
    )

    def _rules(self, where: str, errors: Errors) -> None:
        for req, lim in (("cpu", "cpu_limit"), ("memory", "memory_limit")):
            errors.run(
                functools.partial(self._not_below, where, req, lim), f"{where}.{req}", f"{where}.{lim}"
            )

    def _not_below(self, where: str, req: str, lim: str) -> None:
        low, high = getattr(self, req), getattr(self, lim)
        if low is not None and high is not None and quantity_value(high) < quantity_value(low):
            raise SpecError(f"{where}.{lim}", f"must not be lower than {req} ({low})", high)

    def validate(self, where: str) -> None:
        errors = Errors()
        check_fields(self, where, errors)
        errors.raise_if_any()

    @property
    def requests(self) -> dict[str, str]:
        out = {}
        if self.cpu:
            out["cpu"] = self.cpu
        if self.memory:
            out["memory"] = self.memory
        return out

    @property
    def limits(self) -> dict[str, str]:
        out = {}
        if self.cpu_limit:
            out["cpu"] = self.cpu_limit
        if self.memory_limit or self.memory:
            out["memory"] = self.memory_limit or self.memory  # type: ignore[assignment]
        if self.gpus:
            out[self.gpu_resource] = str(self.gpus)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, where: str) -> Resources:
        return section_from(cls, data, where)


@dataclass(frozen=True)
class Toleration:
    """A taint the role's pods tolerate (Kubernetes' ``tolerations[]``)."""

    key: str | None = spec_field(
        None,
        kind="str",
        check=_label_key,
        help="taint key (none with `operator: Exists` tolerates every taint)",
    )
    operator: str = choice_field("Equal", ("Equal", "Exists"))
    value: str | None = spec_field(
        None, kind="custom", check=_label_value, schema={"type": "string"}, help="taint value (with `Equal`)"
    )
    effect: str | None = choice_field(
        None, ("NoSchedule", "PreferNoSchedule", "NoExecute"), help_tail="; none matches all"
    )
    toleration_seconds: int | None = spec_field(
        None,
        kind="int",
        lo=0,
        hi=10**9,
        help="with `NoExecute`: how long the pod stays after the taint appears",
    )

    def _rules(self, where: str, errors: Errors) -> None:
        errors.run(
            lambda: self._combination(where),
            f"{where}.key",
            f"{where}.operator",
            f"{where}.value",
            f"{where}.effect",
            f"{where}.toleration_seconds",
        )

    def _combination(self, where: str) -> None:
        if self.key is None and self.operator != "Exists":
            raise SpecError(f"{where}.operator", "must be Exists when no key is given", self.operator)
        if self.operator == "Exists" and self.value not in (None, ""):
            raise SpecError(f"{where}.value", "must be empty when operator is Exists", self.value)
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise SpecError(f"{where}.toleration_seconds", "needs effect NoExecute", self.toleration_seconds)

    def to_k8s(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key is not None:
            out["key"] = self.key
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out
