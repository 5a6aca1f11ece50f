"""Local processes recorded on disk (model server, TensorBoard, the local backend's tasks), so
another process can find, verify and stop them after the one that started them is gone."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

LOCALHOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


# How long a port choice holds (a TensorFlow task listens well before: start-up plus
# TensorFlow's import), and how many taken ports a choice may skip.
PORT_RESERVATION_SECONDS = 600.0
MAX_SKIPPED_PORTS = 1000
#: a record of one choice is a few dozen bytes; anything bigger in the register is not ours
MAX_PORT_RECORD_BYTES = 64 * 1024


def ports_registry() -> Path:
    """Where this user's port choices on this machine are written down: one place for
    every local root and checkout (``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "airflow-tfk", "ports")


def reserve_ports(count: int) -> list[int]:
    """``count`` free loopback ports that nobody of this user on this machine (a local
    cluster's task, a model server, a TensorBoard) was given in the last
    :data:`PORT_RESERVATION_SECONDS`.

    A server binds its port a moment after the choice (a TensorFlow task: seconds, after
    its import), and until then the kernel offers the same free port to the next one who
    asks: two trainings started together would share a port, and the later one fails to
    start its server. So each choice is written down (:func:`ports_registry`) and the next
    one skips it. Past the window the port is bound (the kernel then skips it itself) or
    free again for good. Where the register cannot be written (a read-only home), the
    choice is the kernel's alone, as it would be without it.
    """
    registry = ports_registry()
    try:
        registry.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _only_mine(registry):
            return _reserve(None, count)
        with locked(registry):
            return _reserve(registry, count)
    except OSError:
        return _reserve(None, count)


def _only_mine(directory: Path) -> bool:
    """Nobody but this user can write ``directory``: another's records would steer (or
    stop) our choices, a FIFO planted there hang them, a link named like the lock file
    truncate a file of ours."""
    info = os.stat(directory)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def _port_record(path: Path) -> Any:
    """The JSON of a regular file of at most :data:`MAX_PORT_RECORD_BYTES`, else None: a
    FIFO, a device, a directory or a huge file in the register is not read (nor waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_PORT_RECORD_BYTES:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as fh:
        try:
            return json.loads(fh.read(MAX_PORT_RECORD_BYTES + 1))
        except (OSError, ValueError, RecursionError):
            return None


def _reserve(registry: Path | None, count: int) -> list[int]:
    now = time.time()
    given: set[int] = set()
    for entry in registry.glob("*.json") if registry is not None else ():
        record = _port_record(entry)
        at = record.get("at") if isinstance(record, dict) else None
        if not (isinstance(record, dict) and isinstance(record.get("ports"), list)) or not (
            isinstance(at, (int, float)) and 0 <= now - at < PORT_RESERVATION_SECONDS
        ):
            with contextlib.suppress(OSError):  # a directory stays, and is skipped each time
                entry.unlink(missing_ok=True)  # past the window (or not a record of ours)
            continue
        given.update(p for p in record["ports"] if isinstance(p, int))
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:  # hold every socket until all are bound, so no two get the same port
        while len(ports) < count:
            if len(socks) >= count + MAX_SKIPPED_PORTS:
                raise RuntimeError(f"no {count} free local ports: {len(given)} are held for others")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind((LOCALHOST, 0))
            port = int(sock.getsockname()[1])
            if port not in given:
                ports.append(port)
        if registry is not None:
            write_atomic(registry / f"{uuid.uuid4().hex}.json", json.dumps({"at": now, "ports": ports}))
    finally:
        for sock in socks:
            sock.close()
    return ports


def port_open(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((LOCALHOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def verified(pid: int | None, create_time: float | None, tolerance: float = 1.0) -> psutil.Process | None:
    """The live process ``pid``, if it is still the one that was recorded (its create time
    matches within ``tolerance``; None skips that check), not a reused pid or a zombie."""
    if not pid:
        return None
    try:
        proc = psutil.Process(int(pid))
        if create_time is not None and abs(proc.create_time() - float(create_time)) > tolerance:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def alive(record: dict[str, Any] | None) -> psutil.Process | None:
    """The recorded process if it still runs (and is the same process, not a reused pid)."""
    if not record:
        return None
    return verified(record.get("pid"), float(record.get("create_time", 0)))


def running(proc: psutil.Process) -> bool:
    """``proc`` still runs (a zombie has ended: it runs nothing)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until the processes ended; the ones still running after ``timeout``.

    A zombie counts as ended: it runs nothing, and its parent (init, for daemonized
    processes) reaps it when it gets to it - psutil.wait_procs would wait for that too.
    """
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        procs = [p for p in procs if running(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def signal_all(sig: int, groups: set[int], procs: dict[int, psutil.Process]) -> None:
    """Send ``sig`` to each process group and to each process (psutil checks the pid was
    not reused); the ones already gone are skipped."""
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def start(
    argv: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    log_mode: int = 0o666,
) -> psutil.Process:
    """Start ``argv`` in its own session (it outlives the caller), output appended to
    ``log_path`` (created with ``log_mode``, less the umask)."""
    # psutil.Popen keeps its subprocess.Popen: with only the pid kept, the dropped Popen
    # joins subprocess's list of unwaited children and the next Popen of this process
    # reaps it once it exits, so a later wait() found no exit code (None).
    with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, log_mode), "ab") as out:
        proc = psutil.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            env=env,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    return proc


def stop(record: dict[str, Any] | None, grace: float = 5.0) -> bool:
    """SIGTERM the process group of the recorded process, SIGKILL after ``grace``."""
    proc = alive(record)
    if proc is None:
        return False
    try:
        pgid = os.getpgid(proc.pid)
    except OSError:
        return False
    procs = [proc]
    with contextlib.suppress(psutil.Error):
        procs += proc.children(recursive=True)
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGTERM)
    _, left = psutil.wait_procs(procs, timeout=grace)
    if left:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
        psutil.wait_procs(left, timeout=grace)
    return True


class PortTaken(RuntimeError):
    """The port a server was to listen on was taken by another process before it bound it
    (a free port is only free until someone binds it): start it again on another."""


def listens_on(proc: psutil.Process, port: int) -> bool:
    """Does ``proc`` (or one of its children) hold a listening TCP socket on ``port``? A
    connection that succeeds only says that *somebody* listens there."""
    procs = [proc]
    with contextlib.suppress(psutil.Error):
        procs += proc.children(recursive=True)
    for one in procs:
        try:
            conns = one.net_connections(kind="tcp")
        except psutil.Error:
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return True
    return False


def wait_listening(
    proc: psutil.Process, port: int, timeout: float, log_path: Path, others: Sequence[int] = ()
) -> None:
    """Until ``proc`` itself listens on ``port``; :class:`PortTaken` if it ended while
    another process held the port, or one of the ``others`` it was also given (a server
    that binds them before ``port`` ends on those too), RuntimeError (with its log's tail)
    if it ended or timed out otherwise."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while not listens_on(proc, port):
        if not running(proc):
            for one in (port, *others):
                if port_open(one):
                    raise PortTaken(f"port {one} was taken by another process: {tail(log_path, 3)}")
            raise RuntimeError(f"the process exited before it listened on {port}: {tail(log_path)}")
        if time.monotonic() > deadline:
            held = " (another process holds it)" if port_open(port) else ""
            raise RuntimeError(
                f"nothing of its own listens on port {port}{held} after {timeout:.0f} s: {tail(log_path)}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:])


class ServerDir:
    """A server process that outlives the task that started it (a local model server, a
    local TensorBoard), found again through its directory: ``server.json`` records it
    (pid, create time, its ports...), ``server.log`` holds its output, ``tmp/`` is its
    ``$TMPDIR`` (so what a killed server leaves behind, TensorFlow's autograph modules
    among it, is removed with it, not left in the shared /tmp). Callers hold
    :func:`locked` on ``dir`` around a check-then-start or a stop."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.record_path = directory / "server.json"
        self.log_path = directory / "server.log"
        self.tmp_dir = directory / "tmp"

    def record(self) -> dict[str, Any] | None:
        return read_record(self.record_path)

    def running(self) -> dict[str, Any] | None:
        """The record, if its process still runs."""
        record = self.record()
        return record if alive(record) is not None else None

    def start(
        self, argv: list[str], env: dict[str, str], **fields: Any
    ) -> tuple[psutil.Process, dict[str, Any]]:
        """Start ``argv`` here, with its own empty ``$TMPDIR``, and record it with
        ``fields``; the process and its record."""
        shutil.rmtree(self.tmp_dir, ignore_errors=True)  # an earlier server's, killed
        self.tmp_dir.mkdir(mode=0o700, parents=True)
        proc = start(argv, self.log_path, {**env, "TMPDIR": str(self.tmp_dir)}, cwd=str(self.dir))
        record = {"pid": proc.pid, "create_time": proc.create_time(), **fields, "argv": argv}
        write_atomic(self.record_path, json.dumps(record, indent=1))
        return proc, record

    def wait_listening(
        self,
        proc: psutil.Process,
        record: dict[str, Any],
        port: int,
        timeout: float,
        others: Sequence[int] = (),
    ) -> None:
        """Until ``proc`` listens on ``port`` (the one it binds last of ``others`` and
        ``port``); if it never does, it is stopped and forgotten."""
        try:
            wait_listening(proc, port, timeout, self.log_path, others)
        except BaseException:
            stop(record)
            self.record_path.unlink(missing_ok=True)
            shutil.rmtree(self.tmp_dir, ignore_errors=True)
            raise

    def stop(self) -> dict[str, Any] | None:
        """Stop the recorded process and forget it; its record if it was running."""
        record = self.record()
        stopped = stop(record)
        self.record_path.unlink(missing_ok=True)
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        return record if stopped else None
