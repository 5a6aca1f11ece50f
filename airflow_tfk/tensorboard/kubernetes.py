"""TensorBoard on Kubernetes: a Deployment + Service from ``templates/tensorboard/`` over the
logs claim, reached through the API server's service proxy (no ingress needed).

It keeps running after the task that started it and is stopped explicitly
(:meth:`KubernetesTensorBoard.stop`), e.g. by a teardown task. Talks to the API server
only through :mod:`airflow_tfk.kube`.
"""

from __future__ import annotations

from typing import Any

from airflow_tfk.constants import FIELD_MANAGER, KUBERNETES_CONN_ID
from airflow_tfk.kube.api import BY_KIND, SyncApi, is_not_found, kind_of
from airflow_tfk.kube.connection import KubeConnection
from airflow_tfk.naming import RunIdentity
from airflow_tfk.serving.base import Emit
from airflow_tfk.serving.kubernetes import service_proxy_path
from airflow_tfk.serving.spec import TensorBoardSpec


class KubernetesTensorBoard:
    """TensorBoard Deployment + Service from ``templates/tensorboard/``."""

    kind = "kubernetes"

    def __init__(
        self,
        spec: TensorBoardSpec,
        conn_id: str = KUBERNETES_CONN_ID,
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        identity: RunIdentity | None = None,
        field_manager: str = FIELD_MANAGER,
        **_ignored: Any,
    ) -> None:
        self.spec = spec
        self.connection = KubeConnection(conn_id, cluster_context, config_file, in_cluster)
        self.identity = identity
        self.field_manager = field_manager

    def config(self) -> dict[str, Any]:
        return {**self.connection.config(), "field_manager": self.field_manager}

    @property
    def api(self) -> SyncApi:
        return self.connection.api

    @property
    def url(self) -> str:
        host = self.api.client.configuration.host.rstrip("/")
        return host + service_proxy_path(self.spec.namespace, self.spec.name, self.spec.port, "/")

    def start(self, emit: Emit) -> str:
        from airflow_tfk.serving._proxy_source import api_server_cidrs
        from airflow_tfk.serving.render import render_tensorboard

        # Before anything is applied: a policy whose proxy source cannot be known fails here.
        proxy_cidrs = api_server_cidrs(self.api, self.spec.network_policy)
        for manifest in render_tensorboard(self.spec, self.identity, api_server_cidrs=proxy_cidrs):
            path = kind_of(manifest).item(self.spec.namespace, manifest["metadata"]["name"])
            self.api.apply(path, manifest, self.field_manager)
        emit(
            f"TensorBoard {self.spec.name} in namespace {self.spec.namespace} over claim "
            f"{self.spec.claim}/{self.spec.sub_path}: {self.url}"
        )
        return self.url

    def stop(self, emit: Emit) -> None:
        # the NetworkPolicy last: the pods stay isolated until they are gone
        for kind in ("Deployment", "Service", "NetworkPolicy"):
            try:
                self.api.request(
                    "DELETE",
                    BY_KIND[kind].item(self.spec.namespace, self.spec.name),
                    {"propagationPolicy": "Background"},
                )
                emit(f"deleted {kind} {self.spec.name}")
            except Exception as exc:
                if not is_not_found(exc):
                    raise
