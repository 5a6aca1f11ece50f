"""The local backend's records on disk, typed: one reader and one writer for each file.

    state.json                 :class:`ClusterState` (with a :class:`TaskEntry` per task)
    tasks/<task>/task.json     :class:`TaskConfig`, what the supervisor runs
    tasks/<task>/supervisor.json, status.json, exit.json
                               :class:`SupervisorInfo`, :class:`AttemptStatus`, :class:`TaskExit`,
                               written by the supervisor (standard library only, so it
                               writes the same keys by hand)

The supervisor (``_local_supervisor.py``, run by path with the standard library only)
reads ``task.json`` and writes its three files by hand, with these keys: loading this
module there (dataclasses and all) made it start measurably later, and a task's deadline
counts from the cluster's creation. ``tests/backends/local/test_records.py`` pins the keys.

The files are plain JSON objects, read leniently: a key a record does not know is ignored
and a missing one takes the field's default, so a record written by hand (the
supervisor's) needs only the keys it has a value for.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger("airflow_tfk.backends.local.backend")

STATE_VERSION = 1
PRIVATE_FILE = 0o600

R = TypeVar("R")


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class ProcessRef:
    """A process as recorded: its pid and create time (None: it was gone at once)."""

    pid: int
    create_time: float | None = None


@dataclass(frozen=True)
class TaskEntry:
    """One task of a cluster in ``state.json``."""

    role: str
    index: int
    port: int | None = None
    supervisor: ProcessRef | None = None

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskEntry:
        sup = data.get("supervisor")
        known = _known(cls, data)
        known["supervisor"] = ProcessRef(**_known(ProcessRef, sup)) if sup else None
        return cls(**known)


@dataclass(frozen=True)
class ClusterState:
    """``state.json``: the cluster as created - spec, owner, ports, supervisors - and its deletion."""

    version: int = STATE_VERSION
    kind: str = "local"
    uid: str = ""
    name: str = ""
    namespace: str = ""
    created_at: float = 0.0
    deleted_at: float | None = None
    deleted_reason: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    spec_hash: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    identity: dict[str, Any] | None = None
    cluster: dict[str, list[str]] = field(default_factory=dict)
    volumes: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    tasks: tuple[TaskEntry, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterState:
        known = _known(cls, data)
        known["tasks"] = tuple(TaskEntry.from_json(t) for t in data.get("tasks") or ())
        return cls(**known)


@dataclass(frozen=True)
class TaskConfig:
    """``task.json``: what the supervisor of one task runs, and its restart policy."""

    role: str
    index: int
    argv: list[str]
    cwd: str
    env: dict[str, str]
    log: str
    retries: int = 0
    permanent_exit_codes: list[int] = field(default_factory=list)
    # restarted without counting against ``retries`` (a task stopped on notice after a
    # checkpoint), as podFailurePolicy's Ignore rule does on Kubernetes
    free_retry_exit_codes: list[int] = field(default_factory=list)
    max_duration_seconds: float | None = None
    deadline: float | None = None
    kill_grace_seconds: float = 5.0
    restart_backoff_seconds: float = 1.0
    # The task's $TMPDIR (its pod's scratch emptyDir): made before each attempt and
    # emptied after it, as a pod that is not restarted in place gets a new one.
    scratch: str = ""


@dataclass(frozen=True)
class SupervisorInfo:
    """``supervisor.json``: written by the supervisor as soon as it runs."""

    pid: int
    started_at: float


@dataclass(frozen=True)
class AttemptStatus:
    """``status.json``: the current attempt (``running``, ``backoff`` or ``exited``)."""

    state: str = ""
    pid: int | None = None
    pid_create_time: float | None = None
    attempt: int = 0
    restarts: int = 0
    pids: list[int] = field(default_factory=list)
    last_exit_code: int | None = None
    time: float | None = None


@dataclass(frozen=True)
class TaskExit:
    """``exit.json``: the task's final outcome, written once (``Succeeded``, ``Failed``, ``Deleted``)."""

    phase: str
    reason: str = ""
    exit_code: int | None = None
    restarts: int = 0
    message: str = ""
    finished_at: float | None = None
    pids: list[int] = field(default_factory=list)


def read(path: Path, record: type[R]) -> R | None:
    """The record in ``path``; None when there is none (or it is unreadable)."""
    data = _read_json(path)
    if not isinstance(data, dict):
        return None
    build = getattr(record, "from_json", None)
    try:
        return build(data) if build is not None else record(**_known(record, data))
    except (TypeError, ValueError):  # a required key is missing: as unreadable
        return None


def write(path: Path, record: Any) -> None:
    """``record`` as a JSON object, atomically and private (see ``_write_json``)."""
    _write_json(path, asdict(record))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` so readers in other processes see the old or the new file, never half.

    The file is 0600: task records hold the task's environment."""
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}.{uuid.uuid4().hex[:6]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    with open(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except ValueError:  # only a crash mid-write of a non-atomic writer could do this
        log.warning("local backend: ignoring unreadable %s", path)
        return None
