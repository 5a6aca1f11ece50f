"""The task's log says how a deleted task ended, whichever saw the end first: the
supervisor (it sends the SIGTERM itself) or the task (the delete's SIGTERM to its group
reached it before the supervisor looked; CI saw that log end without a word)."""

from __future__ import annotations

import json
from pathlib import Path

from airflow_tfk.backends.local.supervisor import Supervisor


def _supervisor(tmp_path: Path) -> Supervisor:
    log = tmp_path / "task.log"
    (tmp_path / "task.json").write_text(json.dumps({"log": str(log), "argv": ["true"]}))
    return Supervisor(str(tmp_path))


def test_a_task_that_ended_on_the_deletes_own_sigterm_says_so(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path)
    (tmp_path / "deleted").touch()  # what the backend's delete marks before its signals
    assert sup.judge(None, 143) == 0
    text = (tmp_path / "task.log").read_text()
    assert text == "[tfk-local] deleted: SIGTERM sent to the task's group; it exited (exit code 143)\n"
    assert json.loads((tmp_path / "exit.json").read_text())["reason"] == "Deleted"


def test_the_supervisors_own_kill_is_said_once(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path)
    (tmp_path / "deleted").touch()
    sup.judge("Deleted", 143)  # kill() has logged it already
    assert not (tmp_path / "task.log").exists()
