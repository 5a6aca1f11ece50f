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

from airflow_tfk.core import bounded_files
from airflow_tfk.core import processes as _process
from airflow_tfk.core.excerpt import failure_excerpt

log = logging.getLogger("airflow_tfk.backends.local.backend")

LOCALHOST = "127.0.0.1"
FAILURE_LOG_LINES = 20
# The most of one log a read takes, from its end: ``logs`` without a line count, and a
# tail whose lines are longer than this, show that much and say so.
MAX_LOG_READ_BYTES = 4 * 1024 * 1024
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


def _tail(path: Path, lines: int | None, root: str | None = None) -> str:
    """The last ``lines`` lines of a file (None: as many as :data:`MAX_LOG_READ_BYTES`
    hold), '' when it does not exist. A log is data: a FIFO, a device or a symlink (on the
    way under ``root`` too) is refused with :class:`~airflow_tfk.core.bounded_files.UnsafeFileError`,
    and no more than :data:`MAX_LOG_READ_BYTES` of it is read, backwards from its end."""
    return bounded_files.tail(path, lines, max_bytes=MAX_LOG_READ_BYTES, root=root)


def _excerpt(log_path: Path, root: str | None = None) -> str:
    """The meaningful last lines of a task's log (no TF runtime noise, no progress JSON)
    and where the whole log is; '' when there are none or the log is not a file to read."""
    try:
        text = failure_excerpt(_tail(log_path, 50 * FAILURE_LOG_LINES, root), FAILURE_LOG_LINES)
    except OSError as exc:
        log.warning("local backend: not reading the log %s: %s", log_path, exc)
        return ""
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
