"""The local backend's typed records read what earlier versions wrote, and write the same keys."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_tfk.backends.local import records as records
from airflow_tfk.backends.local.records import (
    AttemptStatus,
    ClusterState,
    ProcessRef,
    TaskConfig,
    TaskEntry,
    TaskExit,
)

# state.json as the untyped backend of session 3 wrote it.
OLD_STATE = {
    "version": 1,
    "kind": "local",
    "uid": "0123456789abcdef",
    "name": "tfk-x",
    "namespace": "default",
    "created_at": 1700000000.5,
    "deleted_at": None,
    "deleted_reason": "",
    "spec": {"name": "tfk-x", "max_duration_seconds": 60},
    "spec_hash": "abc",
    "labels": {"tfk.airflow.apache.org/cluster": "tfk-x"},
    "identity": {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": -1},
    "cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]},
    "volumes": {"models": "/tmp/m"},
    "workdir": "/w",
    "tasks": [
        {"role": "ps", "index": 0, "port": 1, "supervisor": {"pid": 11, "create_time": 1.5}},
        {"role": "worker", "index": 0, "port": 2, "supervisor": {"pid": 12, "create_time": None}},
    ],
}


def test_state_written_by_the_previous_version_reads_back_typed(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(OLD_STATE))
    state = records.read(path, ClusterState)
    assert state is not None and state.uid == "0123456789abcdef" and state.deleted_at is None
    assert state.tasks == (
        TaskEntry("ps", 0, 1, ProcessRef(11, 1.5)),
        TaskEntry("worker", 0, 2, ProcessRef(12, None)),
    )
    assert state.tasks[1].name == "worker-0" and state.spec["max_duration_seconds"] == 60
    records.write(path, state)  # and writes the same object back
    assert json.loads(path.read_text()) == OLD_STATE


def test_unknown_keys_are_ignored_and_missing_ones_take_their_defaults(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"deleted_at": 5.0, "deleted_reason": "gone", "from_the_future": 1}))
    state = records.read(path, ClusterState)
    assert state == ClusterState(deleted_at=5.0, deleted_reason="gone")
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"state": "backoff", "last_exit_code": 3, "retry_at": 9.0}))
    assert records.read(status, AttemptStatus) == AttemptStatus(state="backoff", last_exit_code=3)


def test_a_missing_unreadable_or_incomplete_record_is_none(tmp_path: Path) -> None:
    assert records.read(tmp_path / "nothing.json", TaskExit) is None
    (tmp_path / "exit.json").write_text(json.dumps({"reason": "no phase"}))
    assert records.read(tmp_path / "exit.json", TaskExit) is None
    (tmp_path / "list.json").write_text("[1, 2]")
    assert records.read(tmp_path / "list.json", ClusterState) is None


def test_task_config_has_the_keys_the_supervisor_reads(tmp_path: Path) -> None:
    config = TaskConfig("worker", 1, ["python", "app.py"], "/w", {"A": "1"}, "/l/worker-1.log", retries=2)
    records.write(tmp_path / "task.json", config)
    data = json.loads((tmp_path / "task.json").read_text())
    assert data["argv"] == ["python", "app.py"] and data["retries"] == 2 and data["deadline"] is None
    assert (tmp_path / "task.json").stat().st_mode & 0o777 == 0o600  # it holds the task's env
    assert records.read(tmp_path / "task.json", TaskConfig) == config
