"""The local backend's files and environment: where state lives, how it is written
(atomically, 0600/0700), how logs are read, and what a task inherits from this process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path

import psutil

from airflow_tfk.core import processes as _process
from airflow_tfk.core.excerpt import failure_excerpt

log = logging.getLogger("airflow_tfk.backends.local.backend")

LOCALHOST = "127.0.0.1"
FAILURE_LOG_LINES = 20
_CTIME_TOLERANCE = 1.0  # seconds; psutil create times of one process agree far better


# What a task process inherits from the process that creates the cluster (an Airflow
# worker, whose environment holds AIRFLOW_CONN_* secrets): these names only. Everything
# else the task needs is in the spec's env, as on Kubernetes.
DEFAULT_ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_ENABLE_ONEDNN_OPTS",
    "XDG_CACHE_HOME",
    "KERAS_HOME",
)
MINIMAL_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
# Set on every supervisor and task process: ``<root digest>/<namespace>/<name>``. Stopping
# a cluster finds its processes by this tag in /proc, so it needs no state file.
MARKER_ENV = "TFK_LOCAL_CLUSTER"
TASK_ENV = "TFK_LOCAL_TASK"  # role-index, on the supervisor and its task
PRIVATE_DIR = 0o700


def _private_dir(path: Path) -> None:
    """``mkdir -p`` where every directory this call creates is 0700."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=PRIVATE_DIR)
        os.chmod(d, PRIVATE_DIR)  # mkdir's mode is filtered by the umask


def _tail(path: Path, lines: int | None) -> str:
    """The last ``lines`` lines of a file (all of it for None), '' when it does not exist."""
    try:
        with open(path, "rb") as fh:
            if lines is None:
                data = fh.read()
            else:
                if lines <= 0:
                    return ""
                fh.seek(0, os.SEEK_END)
                pos = fh.tell()
                data = b""
                while pos > 0 and data.count(b"\n") <= lines:
                    step = min(64 * 1024, pos)
                    pos -= step
                    fh.seek(pos)
                    data = fh.read(step) + data
                data = b"\n".join(data.rstrip(b"\n").split(b"\n")[-lines:])
                if data:
                    data += b"\n"
    except FileNotFoundError:
        return ""
    return data.decode("utf-8", errors="replace")


def _excerpt(log_path: Path) -> str:
    """The meaningful last lines of a task's log (no TF runtime noise, no progress JSON)
    and where the whole log is."""
    text = failure_excerpt(_tail(log_path, 50 * FAILURE_LOG_LINES), FAILURE_LOG_LINES)
    return f"{text}\n(full log: {log_path})" if text else ""


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR so a TIME_WAIT leftover is not mistaken for a listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOCALHOST, port))
            sock.listen(1)
        except OSError:
            return False
    return True


def _verified(pid: int | None, create_time: float | None) -> psutil.Process | None:
    return _process.verified(pid, create_time, _CTIME_TOLERANCE)
