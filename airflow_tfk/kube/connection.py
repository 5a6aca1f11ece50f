"""Connection -> API: the cncf provider's hooks, built in one place.

:class:`KubeConnection` holds what selects a cluster (the Airflow ``kubernetes``
connection and its overrides) and hands out the raw-JSON :class:`~.api.SyncApi` and
:class:`~.api.AsyncApi`. The hooks are imported when first used, never at import time.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, fields
from typing import Any

from airflow_tfk.core import bounded_files
from airflow_tfk.core.bounded_files import MAX_KUBECONFIG_BYTES as MAX_KUBECONFIG_BYTES
from airflow_tfk.core.constants import KUBERNETES_CONN_ID
from airflow_tfk.core.kwargs import init_kwargs
from airflow_tfk.kube.api import AsyncApi, SyncApi

HOOKS_MODULE = "airflow.providers.cncf.kubernetes.hooks.kubernetes"
#: What the async hook's first connection lookup imports inside its functions (Airflow's
#: task SDK): a second or more of imports, on the event loop, in a triggerer that has not
#: looked up a connection yet. Names that an Airflow version lacks are skipped.
CONNECTION_LOOKUP_MODULES = (
    "asgiref.sync",
    "airflow.sdk.execution_time.cache",
    "airflow.sdk.execution_time.supervisor",
)


def check_kubeconfig(path: str, field: str = "config_file") -> None:
    """``path`` is a kubeconfig the client can read (``bounded_files.check_kubeconfig``),
    checked before the client library is even imported."""
    bounded_files.check_kubeconfig(path, field)


def _import_client_modules() -> Any:
    """The hooks module, with what its first use would import on the event loop."""
    hooks = importlib.import_module(HOOKS_MODULE)
    for name in CONNECTION_LOOKUP_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    return hooks


@dataclass
class KubeConnection:
    """Where and how to reach a cluster.

    :param conn_id: Airflow connection of type ``kubernetes``.
    :param cluster_context: kubeconfig context (overrides the connection's).
    :param config_file: kubeconfig path (overrides the connection's).
    :param in_cluster: use the pod's service account (overrides the connection's).
    """

    conn_id: str = KUBERNETES_CONN_ID
    cluster_context: str | None = None
    config_file: str | None = None
    in_cluster: bool | None = None
    _hook: Any = field(default=None, init=False, repr=False, compare=False)
    _api: SyncApi | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> KubeConnection:
        """The connection that ``config`` (keyword arguments of a target) names; other keys
        are ignored."""
        return cls(**{f.name: config[f.name] for f in fields(cls) if f.init and f.name in config})

    def config(self) -> dict[str, Any]:
        """The keyword arguments that rebuild this connection (serializable)."""
        return init_kwargs(self)

    @property
    def hook(self) -> Any:
        """The cncf ``KubernetesHook`` (built once)."""
        if self._hook is None:
            if self.config_file:
                check_kubeconfig(self.config_file)
            from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

            self._hook = KubernetesHook(
                conn_id=self.conn_id,
                cluster_context=self.cluster_context,
                config_file=self.config_file,
                in_cluster=self.in_cluster,
            )
        return self._hook

    @property
    def api(self) -> SyncApi:
        """Raw-JSON requests through the sync hook's client (built once)."""
        if self._api is None:
            self._api = SyncApi(self.hook.api_client)
        return self._api

    @contextlib.asynccontextmanager
    async def async_api(self) -> AsyncIterator[AsyncApi]:
        """Raw-JSON requests through an ``AsyncKubernetesHook`` client, for one session
        (the client's connection pool belongs to the running event loop).

        The hook's module pulls in both Kubernetes clients (seconds on a busy machine):
        it and what its connection lookup imports are loaded in a thread, so a
        triggerer's first wait does not stall every other trigger on the loop."""
        if self.config_file:
            check_kubeconfig(self.config_file)
        hooks = await asyncio.to_thread(_import_client_modules)
        AsyncKubernetesHook = hooks.AsyncKubernetesHook  # a class

        kwargs: dict[str, Any] = {
            "conn_id": self.conn_id,
            "cluster_context": self.cluster_context,
            "in_cluster": self.in_cluster,
        }
        hook = AsyncKubernetesHook(**kwargs)
        if self.config_file:
            # The async hook reads the kubeconfig path from the connection only; hand it
            # the connection's extras with our override instead.
            extras = dict(await hook.get_conn_extras())
            extras.pop("kube_config", None)
            extras["kube_config_path"] = self.config_file
            hook = AsyncKubernetesHook(connection_extras=extras, **kwargs)
        async with hook.get_conn() as client:
            yield AsyncApi(client)
