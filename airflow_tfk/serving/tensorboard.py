"""TensorBoard over a training's log directory: a Deployment + Service on Kubernetes
(reached through the API server's service proxy), or a local ``tensorboard`` process.

Both keep running after the task that started them and are stopped explicitly
(:meth:`stop`), e.g. by a teardown task.
"""

from __future__ import annotations

import json
import os
import sys
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow_tfk import _process
from airflow_tfk.naming import RunIdentity
from airflow_tfk.serving.base import Emit
from airflow_tfk.serving.local import default_root, store_path
from airflow_tfk.serving.spec import TensorBoardSpec


class LocalTensorBoard:
    """``tensorboard --logdir`` on 127.0.0.1, recorded under
    ``<root>/<namespace>/.tensorboard/<name>/`` (``server.json``, ``server.log``)."""

    kind = "local"

    def __init__(
        self,
        spec: TensorBoardSpec,
        root: str | None = None,
        start_timeout_seconds: float = 120.0,
        **_ignored: Any,
    ) -> None:
        self.spec = spec
        self.root = os.path.abspath(os.path.expanduser(root or default_root()))
        self.start_timeout_seconds = float(start_timeout_seconds)
        self.dir = Path(self.root, spec.namespace, ".tensorboard", spec.name)
        self.record_path = self.dir / "server.json"
        self.log_path = self.dir / "server.log"

    def config(self) -> dict[str, Any]:
        return {"root": self.root, "start_timeout_seconds": self.start_timeout_seconds}

    def logdir(self) -> str:
        return store_path(
            self.root, self.spec.namespace, self.spec.claim, self.spec.sub_path, self.spec.base_path
        )

    def _record(self) -> dict[str, Any] | None:
        return _process.read_record(self.record_path)

    def running(self) -> bool:
        return _process.alive(self._record()) is not None

    @property
    def url(self) -> str:
        record = self._record()
        if not record:
            raise RuntimeError(f"no local TensorBoard {self.spec.name}")
        return f"http://127.0.0.1:{record['port']}/"

    def start(self, emit: Emit) -> str:
        with _process.locked(self.dir):
            record = self._record()
            if _process.alive(record) is not None:
                emit(
                    f"TensorBoard {self.spec.name} already runs (pid {record['pid']}) at "
                    f"{self.url} over {record['logdir']}"
                )
                return self.url
            logdir = self.logdir()
            os.makedirs(logdir, exist_ok=True)
            port = self.spec.port if self.spec.port and _free(self.spec.port) else _process.free_port()
            argv = [
                sys.executable,
                "-m",
                "tensorboard.main",
                f"--logdir={logdir}",
                "--host=127.0.0.1",
                f"--port={port}",
                f"--reload_interval={self.spec.reload_seconds}",
            ]
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
            proc = _process.start(argv, self.log_path, env, cwd=str(self.dir))
            record = {
                "pid": proc.pid,
                "create_time": proc.create_time(),
                "port": port,
                "logdir": logdir,
                "argv": argv,
            }
            _process.write_atomic(self.record_path, json.dumps(record, indent=1))
            try:
                _process.wait_listening(proc, port, self.start_timeout_seconds, self.log_path)
            except BaseException:
                _process.stop(record)
                self.record_path.unlink(missing_ok=True)
                raise
        emit(f"TensorBoard {self.spec.name} (pid {proc.pid}) at {self.url} over {logdir}")
        return self.url

    def stop(self, emit: Emit) -> None:
        with _process.locked(self.dir):
            record = self._record()
            if _process.stop(record):
                emit(f"stopped TensorBoard {self.spec.name} (pid {record['pid']})")  # type: ignore[index]
            self.record_path.unlink(missing_ok=True)


def _free(port: int) -> bool:
    return not _process.port_open(port, timeout=0.2)


class KubernetesTensorBoard:
    """TensorBoard Deployment + Service from ``templates/tensorboard/``."""

    kind = "kubernetes"

    def __init__(
        self,
        spec: TensorBoardSpec,
        conn_id: str = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        identity: RunIdentity | None = None,
        field_manager: str = "airflow-tfk",
        **_ignored: Any,
    ) -> None:
        self.spec = spec
        self.conn_id = conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.in_cluster = in_cluster
        self.identity = identity
        self.field_manager = field_manager

    def config(self) -> dict[str, Any]:
        return {
            "conn_id": self.conn_id,
            "cluster_context": self.cluster_context,
            "config_file": self.config_file,
            "in_cluster": self.in_cluster,
            "field_manager": self.field_manager,
        }

    @cached_property
    def api(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        from airflow_tfk.backends._k8s_api import SyncApi

        return SyncApi(
            KubernetesHook(
                conn_id=self.conn_id,
                cluster_context=self.cluster_context,
                config_file=self.config_file,
                in_cluster=self.in_cluster,
            ).api_client
        )

    @property
    def url(self) -> str:
        from airflow_tfk.serving.kubernetes import service_proxy_path

        host = self.api.client.configuration.host.rstrip("/")
        return host + service_proxy_path(self.spec.namespace, self.spec.name, self.spec.port, "/")

    def start(self, emit: Emit) -> str:
        from airflow_tfk.backends._k8s_api import kind_of
        from airflow_tfk.serving._proxy_source import api_server_cidrs
        from airflow_tfk.serving.render import render_tensorboard

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
        from airflow_tfk.backends._k8s_api import BY_KIND, is_not_found

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
