"""Forged local records and logs (issue 35): the local backend's root is data that anyone
with this uid may have replaced. With one forged cluster beside a good one,
``airflow-tfk clusters list/status/logs`` and the orphan sweeper keep working for every
cluster: the forged record is skipped with a warning naming it, a forged log is refused
or read within its bound, and nothing outside the root is printed. Each case runs within
1 CPU-s and 100 MB and never hangs (a FIFO in place of a file would).

The cases are generated: every field of each record with a value of the wrong type,
every file replaced by a FIFO, a directory, a symlink out of the root, ``/dev/zero``,
oversized and too deeply nested JSON; logs without newlines, gigabytes long (sparse).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local import records
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.backends.local.files import MAX_LOG_READ_BYTES
from airflow_tfk.cli import main as cli
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.orphans import sweep

from .test_hostile_dagfactory import CPU_LIMIT, MEMORY_LIMIT, _run_bounded

SECRET = "tfk-secret-outside-the-root"
GOOD, FORGED = "good", "forged"
OWNER = {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1}


def _state(name: str) -> dict[str, Any]:
    return {
        "version": 1,
        "kind": "local",
        "uid": f"{name}-uid",
        "name": name,
        "namespace": "default",
        "created_at": 1.0,
        "spec": {"name": name, "max_duration_seconds": None},
        "labels": {"tfk.airflow.apache.org/cluster": name},
        "identity": OWNER,
        "tasks": [{"role": "worker", "index": 0, "port": None, "supervisor": None}],
    }


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))


Forge = Callable[[Path, Path], None]  # (the file to forge, a directory outside the root)


@dataclass(frozen=True)
class Case:
    id: str
    file: str  # under the forged cluster's directory
    forge: Forge
    state_ok: bool  # the forged cluster is still listed


def _replace(data: Any) -> Forge:
    return lambda path, _outside: _write(path, data)


def _fifo(path: Path, _outside: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _directory(path: Path, _outside: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


def _link_to(target: str) -> Forge:
    def forge(path: Path, outside: Path) -> None:
        path.unlink(missing_ok=True)
        path.symlink_to(target.replace("$OUT", str(outside)))

    return forge


def _sparse(size: int, end: bytes = b"") -> Forge:
    """A file of ``size`` bytes (a hole, no newline) ending with ``end``: gigabytes cost
    nothing on disk."""

    def forge(path: Path, _outside: Path) -> None:
        with open(path, "wb") as fh:
            fh.truncate(size - len(end))
            fh.seek(size - len(end))
            fh.write(end)

    return forge


def _dir_link(path: Path, outside: Path) -> None:
    """The file's directory replaced by a link to a copy out of the root, whose logs (and
    the file, unless it is the cluster's valid state) hold the secret."""
    linked = outside / "linked"
    shutil.copytree(path.parent, linked)
    for log in linked.rglob("*.log"):
        log.write_text(SECRET + "\n")
    if path.name != "state.json":
        (linked / path.name).write_text(SECRET + "\n")
    shutil.rmtree(path.parent)
    path.parent.symlink_to(linked)


def _file_kinds(file: str, state_ok: bool) -> list[Case]:
    return [
        Case(f"{file}-fifo", file, _fifo, state_ok),
        Case(f"{file}-directory", file, _directory, state_ok),
        Case(f"{file}-link-out", file, _link_to("$OUT/secret"), state_ok),
        Case(f"{file}-dev-zero", file, _link_to("/dev/zero"), state_ok),
        Case(f"{file}-dir-link-out", file, _dir_link, state_ok),
        Case(f"{file}-deep-json", file, _replace("[" * 200_000 + "]" * 200_000), state_ok),
        Case(f"{file}-deep-101", file, _replace('{"a":' * 101 + "1" + "}" * 101), state_ok),
        Case(f"{file}-oversized", file, _sparse(records.MAX_RECORD_BYTES + 1), state_ok),
        Case(f"{file}-huge-sparse", file, _sparse(20 * 2**30), state_ok),
        Case(f"{file}-not-json", file, _replace("{not json"), state_ok),
        Case(f"{file}-array", file, _replace([1, 2, 3]), state_ok),
        Case(f"{file}-huge-int", file, _replace('{"pid": ' + "9" * 5000 + "}"), state_ok),
    ]


# A value of the wrong type for every type a record field has.
WRONG = {"str": 5, "int": "5", "float": "x", "bool": 1, "dict": [1], "list": {"a": 1}, "tuple": "ab"}


def _wrong_for(hint: str) -> list[Any]:
    out = [WRONG[k] for k in WRONG if hint.startswith(k) or f" {k}" in hint or f"[{k}" in hint]
    return out or [object.__name__]


def _field_cases() -> list[Case]:
    """Every field of state.json and of the task's records with values of wrong types."""
    out: list[Case] = []
    base = _state(FORGED)
    for f in fields(records.ClusterState):
        for i, value in enumerate([*_wrong_for(str(f.type)), True, [], {}]):
            if value in ([], {}) and f.type.startswith(("dict", "tuple", "list")):
                continue
            if f.name == "deleted_at" and value is True:
                continue
            out.append(Case(f"state-{f.name}-{i}", "state.json", _replace({**base, f.name: value}), False))
    nested = {
        "task-not-object": [1],
        "task-role-traversal": [{"role": "../../../etc", "index": 0}],
        "task-index-negative": [{"role": "worker", "index": -1}],
        "task-index-huge": [{"role": "worker", "index": 10**12}],
        "task-index-bool": [{"role": "worker", "index": True}],
        "task-supervisor-str": [{"role": "worker", "index": 0, "supervisor": "x"}],
        "task-supervisor-pid-str": [{"role": "worker", "index": 0, "supervisor": {"pid": "1"}}],
    }
    out += [
        Case(f"state-{k}", "state.json", _replace({**base, "tasks": v}), False) for k, v in nested.items()
    ]
    out += [
        Case("state-identity-partial", "state.json", _replace({**base, "identity": {"dag_id": "d"}}), False),
        Case(
            "state-max-duration-str",
            "state.json",
            _replace({**base, "spec": {"max_duration_seconds": "1"}}),
            False,
        ),
        Case("state-other-name", "state.json", _replace({**base, "name": GOOD}), False),
        Case("state-bad-name", "state.json", _replace({**base, "name": "../x"}), False),
        Case("state-other-namespace", "state.json", _replace({**base, "namespace": "kube-system"}), False),
    ]
    task = "tasks/worker-0/"
    for record, file in (
        (records.TaskExit, "exit.json"),
        (records.AttemptStatus, "status.json"),
        (records.SupervisorInfo, "supervisor.json"),
        (records.TaskConfig, "task.json"),
    ):
        for f in fields(record):
            for i, value in enumerate(_wrong_for(str(f.type))):
                out.append(Case(f"{file}-{f.name}-{i}", task + file, _replace({f.name: value}), True))
    out.append(Case("exit.json-phase-unknown", task + "exit.json", _replace({"phase": "Exploded"}), True))
    return out


def _log_cases() -> list[Case]:
    log = "logs/worker-0.log"
    return [
        Case("log-fifo", log, _fifo, True),
        Case("log-directory", log, _directory, True),
        Case("log-link-out", log, _link_to("$OUT/secret"), True),
        Case("log-dev-zero", log, _link_to("/dev/zero"), True),
        Case("log-dir-link-out", log, _dir_link, True),
        Case("log-20GiB-no-newline", log, _sparse(20 * 2**30), True),
        Case("log-300MB-lines-at-end", log, _sparse(300 * 2**20, b"line\n" * 1000), True),
        Case("log-one-long-last-line", log, _sparse(50 * 2**20, b"\nlast"), True),
        Case("log-binary", log, _replace("\x1b]0;pwned\x07\x00" * 1000), True),
    ]


CASES = [
    *_file_kinds("state.json", False),
    *_field_cases(),
    *[
        c
        for f in ("exit.json", "status.json", "supervisor.json")
        for c in _file_kinds(f"tasks/worker-0/{f}", True)
    ],
    *_log_cases(),
]


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["clusters", *argv, "--backend", "local"])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "root"
    monkeypatch.setenv("TFK_LOCAL_ROOT", str(root))
    for name in (GOOD, FORGED):
        cdir = root / "default" / name
        _write(cdir / "state.json", _state(name))
        _write(cdir / "logs" / "worker-0.log", f"hello from {name}\n")
        (cdir / "tasks" / "worker-0").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text(SECRET + "\n")
    return root


def test_the_corpus_is_large_and_unique() -> None:
    assert len(CASES) >= 150 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_one_forged_record_leaves_every_command_working(case: Case, root: Path) -> None:
    path = root / "default" / FORGED / case.file
    path.parent.mkdir(parents=True, exist_ok=True)
    case.forge(path, root.parent / "outside")
    said: dict[str, tuple[int, str, str]] = {}

    def commands() -> None:
        said["list"] = _cli("list", "-o", "json")
        said["status"] = _cli("status", FORGED)
        said["logs"] = _cli("logs", FORGED, "worker-0")
        said["logs-all"] = _cli("logs", FORGED, "worker-0", "--tail", "-1")

    exc, cpu, peak, finished = _run_bounded(commands)
    assert finished, "hung"
    assert exc is None, repr(exc)
    assert cpu < 4 * CPU_LIMIT, f"{cpu:.2f} CPU-s for four commands"
    assert peak < MEMORY_LIMIT, f"{peak / 2**20:.0f} MB"
    code, out, _ = said["list"]
    listed = [row["name"] for row in json.loads(out)] if code == 0 else []
    assert code == 0 and GOOD in listed
    assert (FORGED in listed) == case.state_ok
    for name, (code, out, err) in said.items():
        assert SECRET not in out + err, name
        assert "Traceback" not in err, name
        assert code in (0, 1), name
        assert len(out) <= MAX_LOG_READ_BYTES + 4096, name
    code, out, err = said["logs"]
    assert code == 0 or err.startswith("error: "), err


@pytest.mark.parametrize("case", [c for c in CASES if not c.state_ok][:: max(1, len(CASES) // 40)])
def test_the_sweeper_sweeps_the_others_beside_a_forged_record(case: Case, root: Path) -> None:
    case.forge(root / "default" / FORGED / case.file, root.parent / "outside")
    backend = LocalBackend(str(root))
    said: list[str] = []
    results: list[Any] = []
    exc, cpu, _, finished = _run_bounded(
        lambda: results.extend(sweep(backend, None, lambda _i: None, emit=said.append))
    )
    assert finished and exc is None, repr(exc)
    assert [r.ref for r in results] == [ClusterRef(GOOD, "default")] and results[0].deleted
    assert not backend.exists(ClusterRef(GOOD, "default"))


def test_a_forged_record_is_skipped_with_a_warning_naming_it(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = root / "default" / FORGED / "state.json"
    state.write_text("[" * 100_000)
    backend = LocalBackend(str(root))
    assert backend.clusters(None) == [ClusterRef(GOOD, "default")]
    assert str(state) in caplog.text and "skipping the record" in caplog.text


def test_logs_show_the_last_200_lines_by_default_and_tail_reads_backwards(root: Path) -> None:
    log = root / "default" / GOOD / "logs" / "worker-0.log"
    log.write_text("".join(f"line {i}\n" for i in range(1000)))
    code, out, _ = _cli("logs", GOOD, "worker-0")
    assert code == 0 and out.splitlines() == [f"line {i}" for i in range(800, 1000)]
    code, out, _ = _cli("logs", GOOD, "worker-0", "--tail", "3")
    assert out == "line 997\nline 998\nline 999\n"
    code, out, _ = _cli("logs", GOOD, "worker-0", "--tail", "-1")
    assert out.splitlines()[0] == "line 0" and len(out.splitlines()) == 1000
    _sparse(20 * 2**30, b"x" * 10 + b"\nend\n")(log, root)
    code, out, _ = _cli("logs", GOOD, "worker-0", "--tail", "5")
    assert code == 0 and out.startswith("[... earlier output not shown") and out.endswith("\nend\n")
    assert len(out) < 100_000  # the line of 4 MiB is cut at 64 KiB
    ref = ClusterRef(GOOD, "default")
    assert LocalBackend(str(root)).owner(ref).identity == RunIdentity.from_dict(OWNER)
