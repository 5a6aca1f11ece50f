"""TensorBoard as a local ``tensorboard`` process over a training's log directory.

It keeps running after the task that started it and is stopped explicitly
(:meth:`LocalTensorBoard.stop`), e.g. by a teardown task.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from airflow_tfk.core import processes as _process
from airflow_tfk.serving.base import Emit
from airflow_tfk.serving.local import LocalServer
from airflow_tfk.serving.spec import TensorBoardSpec


class LocalTensorBoard(LocalServer[TensorBoardSpec]):
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
        super().__init__(spec, root, ".tensorboard", start_timeout_seconds)

    def logdir(self) -> str:
        return self.store()

    def _record(self) -> dict[str, Any] | None:
        return self.process.record()

    def running(self) -> bool:
        return self.process.running() is not None

    @property
    def url(self) -> str:
        record = self._record()
        if not record:
            raise RuntimeError(f"no local TensorBoard {self.spec.name}")
        return f"http://127.0.0.1:{record['port']}/"

    def start(self, emit: Emit) -> str:
        self._start_once(
            emit,
            lambda record: (
                f"TensorBoard {self.spec.name} already runs (pid {record['pid']}) at "
                f"{self.url} over {record['logdir']}"
            ),
            lambda: self._launch_on_free_ports(emit, lambda retry: self._launch(emit, retry)),
        )
        return self.url

    def _launch(self, emit: Emit, retry: bool = False) -> None:
        logdir = self.logdir()
        os.makedirs(logdir, exist_ok=True)
        wanted = self.spec.port if self.spec.port and not retry else 0
        port = wanted if wanted and _free(wanted) else _process.reserve_ports(1)[0]
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
        proc, record = self.process.start(argv, env, port=port, logdir=logdir)
        self.process.wait_listening(proc, record, port, self.start_timeout_seconds)
        emit(f"TensorBoard {self.spec.name} (pid {proc.pid}) at {self.url} over {logdir}")

    def stop(self, emit: Emit) -> None:
        with _process.locked(self.dir):
            record = self.process.stop()
        if record is not None:
            emit(f"stopped TensorBoard {self.spec.name} (pid {record['pid']})")


def _free(port: int) -> bool:
    return not _process.port_open(port, timeout=0.2)
