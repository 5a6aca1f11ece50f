"""One task's run as a cost counts it: how long it ran, and what it requested (a backend
reads them; ``airflow_tfk.run.usage`` sums and prices them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GIB = 2.0**30
#: the extended resources counted as accelerators
ACCELERATOR_SUFFIXES = ("/gpu", "/tpu")


@dataclass(frozen=True)
class TaskUsage:
    """One task's run: ``seconds`` it ran, and what it requested (``cpu`` in cores,
    ``memory`` in bytes, an accelerator resource such as ``nvidia.com/gpu`` in units)."""

    task: str
    role: str
    seconds: float
    requests: Mapping[str, float]

    @property
    def cores(self) -> float:
        return float(self.requests.get("cpu", 0.0))

    @property
    def memory_gib(self) -> float:
        return float(self.requests.get("memory", 0.0)) / GIB

    @property
    def accelerators(self) -> float:
        return float(sum(v for k, v in self.requests.items() if k.endswith(ACCELERATOR_SUFFIXES)))
