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

They are also data that anyone with this uid may have replaced, so they are read with
bounds (:mod:`airflow_tfk.core.bounded_files`: a regular file, no symlink, at most
:data:`MAX_RECORD_BYTES`, nested at most :data:`MAX_RECORD_DEPTH` deep) and every value is
checked against its field's type before a record is built: one bad record is that
record's warning (naming the file) and reads as none, never an error of every command.
"""

from __future__ import annotations

import json
import logging
import os
import types
import typing
import uuid
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from airflow_tfk.core import bounded_files

log = logging.getLogger("airflow_tfk.backends.local.backend")

STATE_VERSION = 1
PRIVATE_FILE = 0o600
# A state.json holds the spec (at most 1 MiB of YAML) and a task.json the task's
# environment (256 KiB from the spec plus what it inherits): far below these.
MAX_RECORD_BYTES = 4 * 1024 * 1024
MAX_RECORD_DEPTH = 100
MAX_TASK_INDEX = 999_999
# The roles a task entry may name (spec.roles.ROLES; repeated here because the names
# become paths: tasks/<role>-<index>).
TASK_ROLES = frozenset({"chief", "ps", "worker", "evaluator"})
TASK_PHASES = frozenset({"Succeeded", "Failed", "Deleted"})

R = TypeVar("R")


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

    def __post_init__(self) -> None:
        # The name becomes a path (tasks/<role>-<index>): only the roles there are.
        if self.role not in TASK_ROLES or not 0 <= self.index <= MAX_TASK_INDEX:
            raise ValueError(f"not a task: role {self.role!r}, index {self.index!r}")

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


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

    def __post_init__(self) -> None:
        limit = self.spec.get("max_duration_seconds")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))):
            raise ValueError(f"spec.max_duration_seconds is not a number: {limit!r}")
        if self.identity is not None and not (
            all(isinstance(self.identity.get(k), str) for k in ("dag_id", "task_id", "run_id"))
            and _conforms(self.identity.get("map_index", -1), int)
        ):
            raise ValueError("identity is not a task instance (dag_id, task_id, run_id, map_index)")


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

    def __post_init__(self) -> None:
        if self.phase not in TASK_PHASES:
            raise ValueError(f"phase {self.phase!r} is none of {sorted(TASK_PHASES)}")


def read(path: Path, record: type[R], root: str | None = None) -> R | None:
    """The record in ``path``; None when there is none, or when it is not a record (see
    the module's doc), with a warning naming the file and why. Given ``root``, a
    symlink anywhere on the way from it is refused too."""
    try:
        data = _read_json(path, root)
        return None if data is None else _build(record, data, path.name)
    except (OSError, ValueError, TypeError) as exc:
        log.warning("local backend: skipping the record %s: %s", path, exc)
        return None


def _conforms(value: Any, hint: Any) -> bool:
    """``value`` (parsed JSON) is of the type ``hint`` names: int is not bool, a float
    field takes an int, ``Any`` takes anything."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items()
        )
    return False


def _build(cls: type[R], data: Any, where: str) -> R:
    """``cls`` from the JSON object ``data``, every known key checked against its field's
    type first (nested records built the same way); :class:`ValueError` naming the field
    otherwise."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: is not a JSON object")
    assert is_dataclass(cls)
    hints = typing.get_type_hints(cls)
    known: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        value, hint = data[f.name], hints[f.name]
        inner = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis]
        if is_dataclass(hint) or (len(inner) == 1 and is_dataclass(inner[0])):
            nested: Any = inner[0] if inner else hint
            if value is None and type(None) in typing.get_args(hint):
                known[f.name] = None
            elif typing.get_origin(hint) is tuple:
                if not isinstance(value, list):
                    raise ValueError(f"{where}.{f.name}: is not a list")
                known[f.name] = tuple(
                    _build(nested, v, f"{where}.{f.name}[{i}]") for i, v in enumerate(value)
                )
            else:
                known[f.name] = _build(nested, value, f"{where}.{f.name}")
        elif _conforms(value, hint):
            known[f.name] = value
        else:
            raise ValueError(f"{where}.{f.name}: is not a {hint} (got {type(value).__name__})")
    try:
        return cls(**known)
    except TypeError as exc:  # a required key is missing
        raise ValueError(f"{where}: {exc}") from None


def write(path: Path, record: Any) -> None:
    """``record`` as a JSON object, atomically and private (see ``_write_json``)."""
    _write_json(path, asdict(record))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` so readers in other processes see the old or the new file, never half.

    The file is 0600: task records hold the task's environment."""
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}.{uuid.uuid4().hex[:6]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    try:
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written temp file is left behind
        tmp.unlink(missing_ok=True)
        raise


def _read_json(path: Path, root: str | None = None) -> Any:
    """The JSON in ``path`` within the records' bounds, None when there is no file."""
    try:
        return bounded_files.read_json(
            path, max_bytes=MAX_RECORD_BYTES, max_depth=MAX_RECORD_DEPTH, root=root
        )
    except FileNotFoundError:
        return None
