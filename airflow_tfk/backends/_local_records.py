"""The local backend's records on disk, typed: one reader and one writer for each file.

    state.json                 :class:`ClusterState` (with a :class:`TaskEntry` per task)
    tasks/<task>/task.json     :class:`TaskConfig`, what the supervisor runs
    tasks/<task>/supervisor.json, status.json, exit.json
                               :class:`SupervisorInfo`, :class:`AttemptStatus`, :class:`TaskExit`,
                               written by the supervisor (standard library only, so it
                               writes the same keys by hand)

The files stay plain JSON objects with the keys they always had, so state written by an
earlier version reads back: a key a record does not know is ignored, a missing one takes
the field's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from airflow_tfk.backends._local_files import _read_json, _write_json

STATE_VERSION = 1

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
    max_duration_seconds: float | None = None
    deadline: float | None = None
    kill_grace_seconds: float = 5.0
    restart_backoff_seconds: float = 1.0


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
