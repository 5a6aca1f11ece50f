"""Pick the serving implementation of a backend kind; imports lazily."""

from __future__ import annotations

import inspect
from typing import Any

from airflow_tfk.serving.spec import ServingSpec


def get_serving_target(kind: str, spec: ServingSpec, **config: Any) -> Any:
    """A :class:`~airflow_tfk.serving.base.ServingTarget`. ``config`` may be a training's
    ``backend_config``: keys the serving side does not use are ignored."""
    if kind == "kubernetes":
        from airflow_tfk.serving.kubernetes import KubernetesServing

        return KubernetesServing(spec, **config)
    if kind == "local":
        from airflow_tfk.serving.local import LocalServing

        keys = inspect.signature(LocalServing).parameters.keys() - {"spec"}
        return LocalServing(spec, **{k: v for k, v in config.items() if k in keys})
    raise ValueError(f"backend: unknown kind {kind!r} (expected 'kubernetes' or 'local')")
