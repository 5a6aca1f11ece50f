"""What every operator that acts on a backend takes: which backend, its options and the
Kubernetes connection, written once."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from airflow_tfk._airflow.templated_fields import CheckedTemplateFields
from airflow_tfk.core.constants import BACKEND, KUBERNETES_CONN_ID, BackendKind
from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators._context import backend_config
from airflow_tfk.spec import operator_options as args


class OnBackendOperator(CheckedTemplateFields, BaseOperator):
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
        if not args.templated(backend):
            _backend_kind(backend)
        args.backend_config_arg(backend_config, backend)
        args.str_arg(kubernetes_conn_id, "kubernetes_conn_id", optional=True, max_len=250)
        self.backend = backend
        self.backend_config = backend_config
        self.kubernetes_conn_id = kubernetes_conn_id

    def backend_options(self) -> dict[str, Any]:
        """``backend_config``, with the connection on Kubernetes; checked again here, as
        rendered (a templated ``backend`` or ``backend_config`` is known only now)."""
        _backend_kind(self.backend)
        if args.templated(self.backend_config):
            raise SpecError("backend_config", "must be a mapping (it rendered to text)", self.backend_config)
        args.backend_config_arg(self.backend_config, self.backend)
        return backend_config(self.backend, self.backend_config, self.kubernetes_conn_id)

    def make_backend(self, **options: Any) -> Any:
        """The backend this task acts on (``options``: :meth:`backend_options`, by
        default), bound on Kubernetes to the deployment's platform policy
        (``[tfk_policy]``): every cluster it creates is checked against it first."""
        from airflow_tfk.backends import get_backend

        return self.bound(get_backend(self.backend, **(options or self.backend_options())))

    def bound(self, target: Any) -> Any:
        """``target`` (a backend, a serving or TensorBoard target) bound on Kubernetes to the
        deployment's platform policy: every pod it makes is checked before it is applied.
        The local backend runs processes, not pods."""
        if self.backend == BackendKind.KUBERNETES:
            from airflow_tfk._airflow.platform_config import platform_policy

            target.policy = platform_policy()
        return target


def _backend_kind(value: object) -> None:
    if not isinstance(value, str) or value not in args.BACKEND_OPTIONS:
        raise SpecError("backend", "must be 'kubernetes' or 'local'", value)
