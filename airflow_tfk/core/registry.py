"""One registry per feature that differs by backend: which class serves each
:class:`~airflow_tfk.core.constants.BackendKind`, named as ``module:Class`` and imported only
when that kind is asked for (choosing the local backend never loads the Kubernetes client).

    BACKENDS = Registry("backend", {
        BackendKind.KUBERNETES: "airflow_tfk.backends.kubernetes.backend:KubernetesBackend",
        BackendKind.LOCAL: "airflow_tfk.backends.local.backend:LocalBackend",
    })
    BACKENDS.load("local")  # the LocalBackend class
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from airflow_tfk.core.constants import BackendKind, backend_kind


class Registry:
    """``feature``'s class for each backend kind; every kind must have one."""

    def __init__(self, feature: str, entries: Mapping[BackendKind, str]) -> None:
        missing = set(BackendKind) - set(entries)
        if missing:
            raise ValueError(f"{feature}: no entry for {', '.join(sorted(k.value for k in missing))}")
        self.feature = feature
        self.entries = dict(entries)

    def load(self, kind: object) -> Any:
        """The class registered for ``kind`` (a :class:`BackendKind` or its text); a
        ValueError naming ``backend`` for any other value."""
        module, _, name = self.entries[backend_kind(kind)].partition(":")
        return getattr(importlib.import_module(module), name)
