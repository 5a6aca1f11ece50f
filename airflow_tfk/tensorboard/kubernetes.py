"""TensorBoard on Kubernetes: a Deployment + Service from ``templates/tensorboard/`` over the
logs claim, reached through the API server's service proxy (no ingress needed).

It keeps running after the task that started it and is stopped explicitly
(:meth:`KubernetesTensorBoard.stop`), e.g. by a teardown task. Talks to the API server
only through :mod:`airflow_tfk.kube`.
"""

from __future__ import annotations

from typing import Any

from airflow_tfk.kube.target import KubeTarget
from airflow_tfk.serving.base import Emit
from airflow_tfk.serving.kubernetes import service_proxy_path
from airflow_tfk.serving.spec import TensorBoardSpec


class KubernetesTensorBoard(KubeTarget):
    """TensorBoard Deployment + Service from ``templates/tensorboard/``; ``config`` are
    :class:`~airflow_tfk.kube.target.KubeTarget`'s (the connection, identity, field manager)."""

    kind = "kubernetes"

    def __init__(self, spec: TensorBoardSpec, **config: Any) -> None:
        super().__init__(**config)
        self.spec = spec

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
            self.apply_object(self.spec.namespace, manifest)
        emit(
            f"TensorBoard {self.spec.name} in namespace {self.spec.namespace} over claim "
            f"{self.spec.claim}/{self.spec.sub_path}: {self.url}"
        )
        return self.url

    def stop(self, emit: Emit) -> None:
        # the NetworkPolicy last: the pods stay isolated until they are gone
        for kind in ("Deployment", "Service", "NetworkPolicy"):
            if self.delete_object(self.spec.namespace, kind, self.spec.name):
                emit(f"deleted {kind} {self.spec.name}")
