"""``_process.ServerDir``: the record of a local server that outlives its task (the local
model server and TensorBoard start, find and stop theirs through it)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_tfk.core import processes as _process

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


def _held_port() -> tuple[socket.socket, int]:
    """A port this test process listens on (another process, to the server under test)."""
    sock = socket.socket()
    sock.bind((_process.LOCALHOST, 0))
    sock.listen(1)
    return sock, int(sock.getsockname()[1])


def test_a_port_another_process_holds_is_not_taken_for_the_servers_own(tmp_path: Path) -> None:
    """The server's port was taken between its choice and its bind: that somebody answers
    on it does not make the server started. It fails to bind and ends; the error says the
    port was taken (PortTaken: the caller starts it again on another port)."""
    holder, port = _held_port()
    server = _process.ServerDir(tmp_path)
    with holder:
        proc, record = server.start([sys.executable, "-c", LISTEN, str(port)], dict(os.environ), port=port)
        with pytest.raises(_process.PortTaken, match=f"port {port} was taken by another process"):
            server.wait_listening(proc, record, port, 20.0)
    assert not server.record_path.exists() and not _process.running(proc)


def test_a_server_that_listens_elsewhere_times_out_naming_the_holder(tmp_path: Path) -> None:
    """A server that runs but binds some other port, while another process holds the
    expected one, is not mistaken for listening: it is stopped after the time-out."""
    holder, port = _held_port()
    elsewhere = _process.free_port()
    server = _process.ServerDir(tmp_path)
    with holder:
        proc, record = server.start([sys.executable, "-c", LISTEN, str(elsewhere)], dict(os.environ))
        with pytest.raises(
            RuntimeError, match=f"nothing of its own listens on port {port} .another process holds it"
        ):
            server.wait_listening(proc, record, port, 3.0)
    assert not server.record_path.exists()
    assert _process.wait_gone([proc], 5.0) == []


def test_listens_on_sees_only_the_process_trees_own_sockets(tmp_path: Path) -> None:
    holder, port = _held_port()
    with holder:
        me = psutil.Process()
        assert _process.listens_on(me, port)
        child = _process.start(
            [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "log", dict(os.environ)
        )
        try:
            assert not _process.listens_on(child, port)
        finally:
            child.kill()
            child.wait(10)


SCRATCH = (
    "import socket, sys, tempfile, time\n"
    "tempfile.mkstemp(prefix='tfk-server-scratch-')  # never removed by the server itself\n"
    "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(1)\n"
    "time.sleep(60)\n"
)


def test_a_server_writes_temporary_files_in_its_own_dir_and_stop_removes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local model server or TensorBoard gets ``<its dir>/tmp`` as $TMPDIR, not this
    process's (the shared /tmp): what it leaves there when stopped (killed: no clean-up of
    its own) goes with it."""
    own_tmp = tmp_path / "caller-tmp"
    own_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(own_tmp))
    server = _process.ServerDir(tmp_path / "server")
    (tmp_path / "server").mkdir()
    port = _process.free_port()
    proc, record = server.start([sys.executable, "-c", SCRATCH, str(port)], dict(os.environ), port=port)
    try:
        server.wait_listening(proc, record, port, 20.0)
        assert proc.environ()["TMPDIR"] == str(server.tmp_dir)
        assert [p.name[:19] for p in server.tmp_dir.iterdir()] == ["tfk-server-scratch-"]
        assert (server.tmp_dir.stat().st_mode & 0o777) == 0o700
    finally:
        server.stop()
    assert not server.tmp_dir.exists()
    assert list(own_tmp.iterdir()) == []


def test_signal_all_reaches_the_group_and_wait_gone_sees_the_processes_end(tmp_path: Path) -> None:
    # A parent and the child it starts, both in the session _process.start gives them.
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    parent = _process.start([sys.executable, "-c", code], tmp_path / "log", dict(os.environ))
    deadline = time.monotonic() + 20
    while not parent.children() and time.monotonic() < deadline:
        time.sleep(0.05)
    procs = {p.pid: p for p in [parent, *parent.children()]}
    assert len(procs) == 2 and all(_process.running(p) for p in procs.values())
    assert _process.wait_gone(list(procs.values()), 0.2) == list(procs.values())  # still there
    _process.signal_all(signal.SIGTERM, {parent.pid}, {})  # the group alone: both get it
    assert _process.wait_gone(list(procs.values()), 20.0) == []
    assert not any(_process.running(p) for p in procs.values())


def test_a_started_process_that_exits_before_the_next_start_keeps_its_exit_code(tmp_path: Path) -> None:
    """The local backend starts one supervisor per task in a row and then waits for each
    (it exits 0 once it has daemonized): an early one's exit code must not be lost to the
    next start (it read "exit code None" under load)."""
    first = _process.start([sys.executable, "-c", "pass"], tmp_path / "first.log")
    deadline = time.monotonic() + 30
    while _process.running(first) and time.monotonic() < deadline:
        time.sleep(0.01)
    second = _process.start([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "second.log")
    assert first.wait(timeout=30) == 0
    assert second.wait(timeout=30) == 3


RESERVE = (
    "import json, sys\n"
    "from airflow_tfk.core import processes as _process\n"
    "print(json.dumps(_process.reserve_ports(int(sys.argv[1]))))\n"
)


def _reserve_in(cache: Path, count: int = 2) -> list[int]:
    """reserve_ports in a process of its own (a hang is a failure, not a stuck test run)."""
    import json
    import subprocess

    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    out = subprocess.run(
        [sys.executable, "-c", RESERVE, str(count)], capture_output=True, text=True, timeout=30, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_junk_in_the_port_register_is_skipped_not_read_or_waited_on(tmp_path: Path) -> None:
    """The register is a plain directory under the user's cache: a FIFO, a directory, a
    huge file, deeply nested JSON or bytes that are not UTF-8 named like a record neither
    hang a reservation, nor fill its memory, nor end it; the choice is still written down."""
    import json

    register = tmp_path / "airflow-tfk" / "ports"
    register.mkdir(parents=True, mode=0o700)
    os.mkfifo(register / "fifo.json")
    (register / "dir.json").mkdir()
    (register / "dir.json" / "x").write_text("keeps the directory from being removed")
    with open(register / "huge.json", "wb") as fh:
        fh.truncate(1 << 34)  # sparse: 16 GiB to read, none on disk
    (register / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (register / "bytes.json").write_bytes(b"\xff\xfe{")
    held = {"at": time.time(), "ports": [1]}
    (register / "held.json").write_text(json.dumps(held))
    start = time.monotonic()
    ports = _reserve_in(tmp_path)
    assert len(ports) == 2 and time.monotonic() - start < 20
    records = [
        json.loads(p.read_text()) for p in register.glob("*.json") if p.is_file() and p.stat().st_size < 4096
    ]
    assert held in records and any(r.get("ports") == ports for r in records if isinstance(r, dict))


def test_a_port_register_others_can_write_is_not_used(tmp_path: Path) -> None:
    """Anyone may write a world-writable register (or one of another owner): a planted
    record holding every port would stop every choice, a planted FIFO hang it, a link
    named like the lock truncate a file of ours. Such a register is not used: the kernel
    chooses alone, as where none can be written."""
    import json

    register = tmp_path / "airflow-tfk" / "ports"
    register.mkdir(parents=True)
    register.chmod(0o777)
    (register / "planted.json").write_text(json.dumps({"at": time.time(), "ports": list(range(1, 65536))}))
    mine = tmp_path / "mine.txt"
    mine.write_text("keep")
    (register / ".lock").symlink_to(mine)
    assert len(_reserve_in(tmp_path)) == 2
    assert mine.read_text() == "keep"
    assert [p.name for p in register.glob("*.json")] == ["planted.json"]
