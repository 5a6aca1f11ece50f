"""Pick the serving implementation of a backend kind; imports lazily."""

from __future__ import annotations

from typing import Any

from airflow_tfk.serving.spec import ServingSpec

_LOCAL_SERVING_KEYS = ("root", "poll_seconds", "server", "start_timeout_seconds")


def get_serving_target(kind: str, spec: ServingSpec, **config: Any) -> Any:
    """A :class:`~airflow_tfk.serving.base.ServingTarget`. ``config`` may be a training's
    ``backend_config``: keys the serving side does not use are ignored."""
    if kind == "kubernetes":
        from airflow_tfk.serving.kubernetes import KubernetesServing

        return KubernetesServing(spec, **config)
    if kind == "local":
        from airflow_tfk.serving.local import LocalServing

        return LocalServing(spec, **{k: v for k, v in config.items() if k in _LOCAL_SERVING_KEYS})
    raise ValueError(f"backend: unknown kind {kind!r} (expected 'kubernetes' or 'local')")
