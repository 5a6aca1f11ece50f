"""TensorBoard on Kubernetes: a Deployment + Service from ``templates/tensorboard/`` over the
logs claim, reached through the API server's service proxy (no ingress needed).

:meth:`KubernetesTensorBoard.start` returns once its pod is Ready, and fails as soon as
the pod cannot become Ready by itself (a crash loop, a missing image, an OOM kill, no
node to run on), naming the pod, the reason and its last log lines: a link to a
TensorBoard that never answers is worse than a failed task. It keeps running after the
task that started it and is stopped explicitly (:meth:`KubernetesTensorBoard.stop`), e.g.
by a teardown task. Talks to the API server only through :mod:`airflow_tfk.kube`.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_tfk.kube.target import KubeTarget
from airflow_tfk.serving._pods import PodHealth, is_ready
from airflow_tfk.serving.base import Emit
from airflow_tfk.serving.kubernetes import service_proxy_path
from airflow_tfk.serving.spec import TensorBoardSpec


class TensorBoardFailed(RuntimeError):
    """TensorBoard's pod did not become Ready; its objects were removed."""


class KubernetesTensorBoard(PodHealth, KubeTarget):
    """TensorBoard Deployment + Service from ``templates/tensorboard/``.

    :param start_timeout_seconds: how long :meth:`start` waits for the pod to be Ready
        (an image pull of the default ``tensorflow/tensorflow`` takes minutes).
    :param poll_seconds: how often it looks.

    Other ``config`` are :class:`~airflow_tfk.kube.target.KubeTarget`'s (the connection,
    identity, field manager)."""

    kind = "kubernetes"

    def __init__(
        self,
        spec: TensorBoardSpec,
        *,
        start_timeout_seconds: float = 600.0,
        poll_seconds: float = 1.0,
        **config: Any,
    ) -> None:
        super().__init__(**config)
        self.spec = spec
        self.start_timeout_seconds = float(start_timeout_seconds)
        self.poll_seconds = float(poll_seconds)

    @property
    def url(self) -> str:
        host = self.api.client.configuration.host.rstrip("/")
        return host + service_proxy_path(self.spec.namespace, self.spec.name, self.spec.port, "/")

    def selector(self) -> str:
        from airflow_tfk.tensorboard.render import LABEL_TENSORBOARD

        return f"{LABEL_TENSORBOARD}={self.spec.name},app.kubernetes.io/component=tensorboard"

    def start(self, emit: Emit) -> str:
        from airflow_tfk.serving._proxy_source import api_server_cidrs
        from airflow_tfk.tensorboard.render import render_tensorboard

        # Before anything is applied: a policy whose proxy source cannot be known fails here.
        proxy_cidrs = api_server_cidrs(self.api, self.spec.network_policy)
        for manifest in self.checked(
            render_tensorboard(self.spec, self.identity, api_server_cidrs=proxy_cidrs)
        ):
            self.apply_object(self.spec.namespace, manifest)
        emit(
            f"TensorBoard {self.spec.name} in namespace {self.spec.namespace} over claim "
            f"{self.spec.claim}/{self.spec.sub_path}: waiting until its pod is Ready"
        )
        try:
            took = self.wait_ready(emit)
        except TensorBoardFailed:
            self.stop(emit)
            raise
        emit(f"TensorBoard {self.spec.name} is Ready after {took:.1f} s: {self.url}")
        return self.url

    def wait_ready(self, emit: Emit) -> float:
        """Seconds until a pod of the Deployment is Ready; raises :class:`TensorBoardFailed`
        naming the pod and its reason as soon as none can be, or at the timeout."""
        t0 = time.monotonic()
        namespace, selector = self.spec.namespace, self.selector()
        seen = ""
        while True:
            pods = self.pods(namespace, selector)
            if any(is_ready(p) for p in pods):
                return time.monotonic() - t0
            why = self.pod_failure(namespace, selector, pods)
            if why is not None:
                raise TensorBoardFailed(f"TensorBoard {self.spec.name} cannot run: {why}")
            now = _waiting(pods)
            if now != seen:
                emit(f"TensorBoard {self.spec.name}: {now}")
                seen = now
            if time.monotonic() - t0 > self.start_timeout_seconds:
                raise TensorBoardFailed(
                    f"TensorBoard {self.spec.name} was not Ready within "
                    f"{self.start_timeout_seconds:.0f} s (last seen: {seen})"
                )
            time.sleep(self.poll_seconds)

    def stop(self, emit: Emit) -> None:
        # the NetworkPolicy last: the pods stay isolated until they are gone
        for kind in ("Deployment", "Service", "NetworkPolicy"):
            if self.delete_object(self.spec.namespace, kind, self.spec.name):
                emit(f"deleted {kind} {self.spec.name}")


def _waiting(pods: list[dict[str, Any]]) -> str:
    """What the pods are doing, for the log: ``pod X Pending (ContainerCreating)``."""
    if not pods:
        return "no pod yet"
    parts = []
    for pod in pods:
        status = pod.get("status") or {}
        reasons = [
            ((cs.get("state") or {}).get("waiting") or {}).get("reason")
            for cs in status.get("containerStatuses") or []
        ]
        detail = ", ".join(r for r in reasons if r)
        parts.append(
            f"pod {pod['metadata']['name']} {status.get('phase') or 'Pending'}"
            + (f" ({detail})" if detail else "")
        )
    return "; ".join(parts)
