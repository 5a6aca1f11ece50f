"""Backends: the only code that creates, watches or deletes anything."""

from __future__ import annotations

from typing import Any

from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.core.constants import BACKEND

__all__ = ["Backend", "ClusterRef", "get_backend"]


def get_backend(kind: str = BACKEND, **config: Any) -> Backend:
    """Build a backend from its kind and the ``config()`` of another instance.

    Imports lazily: selecting the local backend never loads the Kubernetes client.
    """
    if kind == "kubernetes":
        from airflow_tfk.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(**config)
    if kind == "local":
        from airflow_tfk.backends.local.backend import LocalBackend

        return LocalBackend(**config)
    raise ValueError(f"backend: unknown kind {kind!r} (expected 'kubernetes' or 'local')")
