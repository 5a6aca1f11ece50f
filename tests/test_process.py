"""``_process.ServerDir``: the record of a local server that outlives its task (the local
model server and TensorBoard start, find and stop theirs through it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from airflow_tfk import _process

LISTEN = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(1)\n"
    "print('listening', flush=True); time.sleep(60)\n"
)


def test_a_started_server_is_recorded_found_and_stopped(tmp_path: Path) -> None:
    server = _process.ServerDir(tmp_path)
    port = _process.free_port()
    proc, record = server.start([sys.executable, "-c", LISTEN, str(port)], dict(os.environ), port=port)
    try:
        server.wait_listening(proc, record, port, 20.0)
        assert server.record() == record
        assert record["pid"] == proc.pid and record["port"] == port
        assert server.running() == record
    finally:
        stopped = server.stop()
    assert stopped == record
    assert not proc.is_running() or proc.status() == "zombie"
    assert server.record() is None and server.running() is None
    assert server.stop() is None  # nothing left to stop
    assert "listening" in server.log_path.read_text()


def test_a_server_that_never_listens_is_stopped_and_forgotten(tmp_path: Path) -> None:
    server = _process.ServerDir(tmp_path)
    port = _process.free_port()
    argv = [sys.executable, "-c", "print('no port for me'); raise SystemExit(3)"]
    proc, record = server.start(argv, dict(os.environ), port=port)
    with pytest.raises(RuntimeError, match="no port for me"):
        server.wait_listening(proc, record, port, 20.0)
    assert not server.record_path.exists()
