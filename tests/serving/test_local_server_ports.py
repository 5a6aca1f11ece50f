"""The local model server's two ports are chosen free and bound a moment later: another
process (a second training's server, the other test lane's) may take either in between.
Made to happen here: the port chosen for gRPC is held by a listening socket. The server
must start again on other ports, and never be reported as started while it is ending."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_tfk.core import processes as _process
from airflow_tfk.serving import local as serving_local
from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.spec import ServingSpec

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another process listens on (here: this one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def test_a_grpc_port_taken_before_the_server_binds_it_starts_it_on_another(
    tmp_path: Path, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen: list[int] = []
    real = _process.reserve_ports

    def reserve_ports(count: int) -> list[int]:  # the 1st gRPC choice: the held port
        ports = real(count)
        if not chosen:
            ports[1] = held_port
        chosen.extend(ports)
        return ports

    monkeypatch.setattr(serving_local._process, "reserve_ports", reserve_ports)
    (tmp_path / "root" / "default" / ".claims" / "models").mkdir(parents=True)
    spec = ServingSpec(model_name="m", claim="models", name="ports")
    target = LocalServing(spec, root=str(tmp_path / "root"), server="stand-in")
    said: list[str] = []
    try:
        target.ensure(said.append)
        record = target._record()
        assert record is not None and record["grpc_port"] != held_port and len(chosen) == 4, (chosen, said)
        assert any(f"port {held_port} was taken by another process" in line for line in said), said
        proc = _process.alive(record)
        assert proc is not None
        assert all(_process.listens_on(proc, record[p]) for p in ("rest_port", "grpc_port")), record
    finally:
        target.delete(print)
