"""How every test starts the stand-in model server: a real process of
``airflow_tfk.runtime.model_server`` on free loopback ports, serving the given models, with
the flags each test adds (limits, timeouts, threads). One start and one stop, so a change to
how the server is started is made once."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from airflow_tfk.core import processes as _process
from airflow_tfk.protocol.model_config import ModelConfig, ModelServerConfig

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class StandIn:
    proc: subprocess.Popen
    rest: int
    grpc: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest}"


@contextmanager
def stand_in_server(
    workdir: Path,
    models: Sequence[ModelConfig],
    *flags: str,
    ready: Callable[[StandIn], bool],
    timeout: float = 180.0,
) -> Iterator[StandIn]:
    """Start the server in ``workdir`` (its config file and log go there), wait until
    ``ready`` says so (an ``OSError`` counts as not yet), and stop it on exit. A free port
    is free only until somebody binds it (the other test lane runs servers too): a server
    that ended while another process held one of its ports starts again on fresh ones."""
    config = workdir / "models.config"
    config.write_text(ModelServerConfig(tuple(models)).to_text())
    log = workdir / "server.log"
    for attempt in range(PORT_ATTEMPTS):
        server = _start(config, log, flags)
        try:
            deadline = time.monotonic() + timeout
            while not _ready(ready, server):
                if server.proc.poll() is not None and attempt < PORT_ATTEMPTS - 1:
                    if _process.port_open(server.rest) or _process.port_open(server.grpc):
                        break  # taken by another process between the choice and the bind
                if time.monotonic() > deadline or server.proc.poll() is not None:
                    said = log.read_text()[-3000:]
                    raise AssertionError(f"the stand-in model server is not ready:\n{said}")
                time.sleep(0.2)
            else:
                yield server
                return
        finally:
            server.proc.terminate()
            server.proc.wait(timeout=20)


PORT_ATTEMPTS = 3


def _start(config: Path, log: Path, flags: Sequence[str]) -> StandIn:
    rest, grpc = _process.free_port(), _process.free_port()
    argv = [
        sys.executable,
        "-m",
        "airflow_tfk.runtime.model_server",
        f"--port={grpc}",
        f"--rest_api_port={rest}",
        "--rest_api_host=127.0.0.1",
        f"--model_config_file={config}",
        *flags,
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    return StandIn(proc, rest, grpc, log)


def _ready(check: Callable[[StandIn], bool], server: StandIn) -> bool:
    try:
        return check(server)
    except OSError:
        return False
