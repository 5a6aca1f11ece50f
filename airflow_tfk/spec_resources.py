"""Per-task resources and tolerations of a role: parts of :class:`TFClusterSpec`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk import naming
from airflow_tfk._spec_checks import _check_gpu_resource, _fields, _int, _reject_unknown
from airflow_tfk.errors import SpecError
from airflow_tfk.quantity import parse_quantity, quantity_value


@dataclass(frozen=True)
class Resources:
    """CPU, memory and GPUs of one task, as Kubernetes quantities.

    :param cpu: CPU request, e.g. ``"1"`` or ``"500m"``.
    :param memory: memory request, e.g. ``"2Gi"``.
    :param cpu_limit: CPU limit; none when omitted.
    :param memory_limit: memory limit; defaults to the memory request, so an OOM is an
        OOMKilled of this task rather than of its neighbours.
    :param gpus: number of GPUs (``gpu_resource`` limit).
    :param gpu_resource: extended resource name of the GPU.
    """

    cpu: str | None = None
    memory: str | None = None
    cpu_limit: str | None = None
    memory_limit: str | None = None
    gpus: int = 0
    gpu_resource: str = "nvidia.com/gpu"

    def validate(self, where: str) -> None:
        for name in ("cpu", "memory", "cpu_limit", "memory_limit"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, parse_quantity(value, f"{where}.{name}"))
        _int(self.gpus, f"{where}.gpus", 0, 64)
        for req, lim in (("cpu", "cpu_limit"), ("memory", "memory_limit")):
            low, high = getattr(self, req), getattr(self, lim)
            if low is not None and high is not None and quantity_value(high) < quantity_value(low):
                raise SpecError(f"{where}.{lim}", f"must not be lower than {req} ({low})", high)
        _check_gpu_resource(self.gpu_resource, f"{where}.gpu_resource")

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
        if data is None:
            return cls()
        _reject_unknown(data, _fields(cls), where)
        return cls(**data)


@dataclass(frozen=True)
class Toleration:
    key: str | None = None
    operator: str = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None

    def validate(self, where: str) -> None:
        if self.operator not in ("Equal", "Exists"):
            raise SpecError(f"{where}.operator", "must be Equal or Exists", self.operator)
        if self.effect not in (None, "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise SpecError(
                f"{where}.effect", "must be NoSchedule, PreferNoSchedule or NoExecute", self.effect
            )
        if self.key is not None and (not isinstance(self.key, str) or not naming.is_label_key(self.key)):
            raise SpecError(f"{where}.key", "is not a valid label key", self.key)
        if self.value is not None and (
            not isinstance(self.value, str) or not naming.is_label_value(self.value)
        ):
            raise SpecError(
                f"{where}.value",
                "must be a string that is a valid label value (quote numbers and booleans)",
                self.value,
            )
        if self.key is None and self.operator != "Exists":
            raise SpecError(f"{where}.operator", "must be Exists when no key is given", self.operator)
        if self.operator == "Exists" and self.value not in (None, ""):
            raise SpecError(f"{where}.value", "must be empty when operator is Exists", self.value)
        if self.toleration_seconds is not None:
            _int(self.toleration_seconds, f"{where}.toleration_seconds", 0, 10**9)
            if self.effect != "NoExecute":
                raise SpecError(
                    f"{where}.toleration_seconds", "needs effect NoExecute", self.toleration_seconds
                )

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
