"""Pick the serving implementation of a backend kind; imports lazily."""

from __future__ import annotations

import inspect
from typing import Any

from airflow_tfk.core.constants import BackendKind, backend_kind
from airflow_tfk.core.registry import Registry
from airflow_tfk.serving.spec import ServingSpec

#: the TF Serving target of each backend kind, imported only when asked for
TARGETS = Registry(
    "serving",
    {
        BackendKind.KUBERNETES: "airflow_tfk.serving.kubernetes:KubernetesServing",
        BackendKind.LOCAL: "airflow_tfk.serving.local:LocalServing",
    },
)


def get_serving_target(kind: str, spec: ServingSpec, **config: Any) -> Any:
    """A :class:`~airflow_tfk.serving.base.ServingTarget`. ``config`` may be a training's
    ``backend_config``: keys the serving side does not use are ignored (the local target
    takes only its own; the Kubernetes one ignores the rest itself)."""
    cls = TARGETS.load(kind)
    if backend_kind(kind) is BackendKind.LOCAL:
        keys = inspect.signature(cls).parameters.keys() - {"spec"}
        config = {k: v for k, v in config.items() if k in keys}
    return cls(spec, **config)
