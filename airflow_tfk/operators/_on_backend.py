"""What every operator that acts on a backend takes: which backend, its options and the
Kubernetes connection, written once."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from airflow_tfk.constants import BACKEND, KUBERNETES_CONN_ID
from airflow_tfk.operators._context import backend_config


class OnBackendOperator(BaseOperator):
    """Base of the operators that act on a backend.

    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options, e.g. ``{"root": ...}`` for local. (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    """

    def __init__(
        self,
        *,
        backend: str = BACKEND,
        backend_config: dict[str, Any] | None = None,
        kubernetes_conn_id: str = KUBERNETES_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.backend = backend
        self.backend_config = backend_config
        self.kubernetes_conn_id = kubernetes_conn_id

    def backend_options(self) -> dict[str, Any]:
        """``backend_config``, with the connection on Kubernetes."""
        return backend_config(self.backend, self.backend_config, self.kubernetes_conn_id)
