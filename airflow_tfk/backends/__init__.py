"""Backends: the only code that creates, watches or deletes anything."""

from __future__ import annotations

from typing import Any

from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.core.constants import BACKEND, BackendKind
from airflow_tfk.core.registry import Registry

__all__ = ["BACKENDS", "Backend", "ClusterRef", "get_backend"]


#: the class of each backend kind, imported only when asked for: selecting the local
#: backend never loads the Kubernetes client
BACKENDS = Registry(
    "backend",
    {
        BackendKind.KUBERNETES: "airflow_tfk.backends.kubernetes.backend:KubernetesBackend",
        BackendKind.LOCAL: "airflow_tfk.backends.local.backend:LocalBackend",
    },
)


def get_backend(kind: str = BACKEND, **config: Any) -> Backend:
    """Build a backend from its kind and the ``config()`` of another instance."""
    backend: Backend = BACKENDS.load(kind)(**config)
    return backend
