"""`airflow-tfk clusters` on the local backend: real processes, the same commands as on
Kubernetes (tests/k8s_integration/test_cli_clusters.py runs them against the API server)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.cli import main as cli
from airflow_tfk.core.naming import RunIdentity
from tests.helpers import assert_no_processes, python_cluster, wait_for

OWNER = RunIdentity("cli_dag", "train", "manual__1", -1)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["clusters", *argv, "--backend", "local"])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TFK_LOCAL_ROOT", str(tmp_path / "root"))
    return tmp_path / "root"


def test_list_status_logs_and_delete_with_owner_checks(root: Path) -> None:
    from airflow_tfk.backends.local.backend import LocalBackend

    backend = LocalBackend()
    script = "import time; print('hello from', __import__('os').environ['TFK_ROLE']); time.sleep(120)"
    ref = backend.create(python_cluster("cli-a", script), OWNER)
    try:
        wait_for(lambda: "hello from" in backend.logs(ref, "worker", 0), 30, "the worker's first line")
        code, out, _ = _run("list")
        assert code == 0
        header, rule, row = out.splitlines()[:3]
        assert [c.strip() for c in header.split("|")] == ["namespace", "name", "age", "tasks", "owner"]
        assert set(rule) == {"=", "+"}
        cells = [c.strip() for c in row.split("|")]
        assert cells[:2] == ["default", "cli-a"] and cells[3] == "worker 1 running"
        assert cells[4] == "dag 'cli_dag', task 'train', run 'manual__1'"

        code, out, _ = _run("status", "cli-a")
        assert code == 0 and "tasks:     worker 1 running" in out and "worker-0     running" in out
        assert "progress:  none reported yet" in out

        code, out, _ = _run("logs", "cli-a", "worker-0")
        assert code == 0 and "hello from worker" in out

        # Not its owner: refused, naming the owner; nothing deleted.
        code, _, err = _run(
            "delete", "cli-a", "--dag-id", "cli_dag", "--task-id", "train", "--run-id", "other"
        )
        assert code == 1 and "belongs to dag 'cli_dag', task 'train', run 'manual__1'" in err
        # The refusal names the flags that name an owner, not the create-time advice.
        assert "refusing to delete it for dag 'cli_dag', task 'train', run 'other'" in err
        assert "name that task instance with --dag-id, --task-id, --run-id" in err
        assert "another name" not in err and len(err.splitlines()) == 1
        code, _, err = _run("delete", "cli-a")
        assert code == 1 and "refusing to delete it without --dag-id/--task-id/--run-id" in err
        assert backend.exists(ref)

        code, out, _ = _run(
            "delete", "cli-a", "--dag-id", "cli_dag", "--task-id", "train", "--run-id", "manual__1"
        )
        assert code == 0 and "deleted cluster cli-a in default" in out
        assert not backend.exists(ref)
        assert_no_processes(root)
    finally:
        backend.delete(ref)


def test_unknown_cluster_and_bad_task_name_are_clear_errors(root: Path) -> None:
    code, _, err = _run("status", "nothing-here")
    assert code == 1 and "cluster nothing-here not found in namespace default" in err
    code, _, err = _run("logs", "nothing-here", "worker")
    assert code == 1 and "TASK: expected ROLE-INDEX" in err
    code, out, _ = _run("list")
    assert code == 0 and out.strip() == "no clusters in namespace default"


def test_sweep_deletes_a_cluster_whose_task_instance_is_gone(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep reads task-instance states from this environment's Airflow database:
    an owner that never ran there is gone, so its still-running cluster is swept."""
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.cli import clusters as cli_clusters

    backend = LocalBackend()
    ref = backend.create(python_cluster("cli-orphan", "import time; time.sleep(120)"), OWNER)
    states: list[RunIdentity] = []

    def state(identity: RunIdentity) -> str | None:
        states.append(identity)
        return None

    monkeypatch.setattr(cli_clusters, "_task_instance_state", state)
    try:
        code, out, _ = _run("sweep", "--dry-run")
        assert code == 0 and "would delete orphaned cluster cli-orphan" in out and backend.exists(ref)
        code, out, _ = _run("sweep")
        assert (
            code == 0 and "deleted cluster cli-orphan in default" in out and "orphan sweeper: orphaned" in out
        )
        assert states[0] == OWNER and not backend.exists(ref)
    finally:
        backend.delete(ClusterRef("cli-orphan", "default"))


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (("status", "../../etc"), "NAME"),
        (("delete", "../x"), "NAME"),
        (("logs", "a,b"), "NAME"),
        (("status", "a\x1b[31mRED"), "NAME"),
        (("status", "x", "-n", "../.."), "--namespace"),
        (("list", "-n", "Bad_NS"), "--namespace"),
        (("sweep", "-n", "a\x1b]0;t\x07", "--dry-run"), "--namespace"),
        (("logs", "x", "worker-0", "--tail", "-5"), "--tail"),
        (("logs", "x", "../../etc-1"), "TASK"),
        (("logs", "x", "worker-" + "9" * 30), "TASK"),
    ],
)
def test_hostile_names_are_refused_before_any_backend(
    argv: tuple[str, ...], field: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name goes into a label selector, a namespace into an API path or a directory: each
    is checked, naming the argument, before a backend is even made; nothing runs, nothing
    is printed raw."""
    from airflow_tfk.cli import clusters as cli_clusters

    def no_backend(args: object) -> None:
        raise AssertionError("a backend was made for a refused command line")

    monkeypatch.setattr(cli_clusters, "_backend", no_backend)
    code, out, err = _run(*argv)
    assert code == 1 and err.startswith(f"error: {field}: "), err
    assert "Traceback" not in err and "\x1b" not in err + out and out == ""


def test_status_escapes_what_the_cluster_says(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's reason can quote its own termination message: the terminal is shown it,
    never told to act on it."""
    from airflow_tfk.cli import clusters as cli_clusters
    from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus

    class Backend:
        def owner(self, ref: ClusterRef) -> None:
            return None

        def status(self, ref: ClusterRef) -> ClusterStatus:
            task = TaskStatus("worker", 0, Phase.FAILED, reason="Error: \x1b]0;owned\x07\x1b[2J", exit_code=1)
            return ClusterStatus((task,))

        def logs(self, *args: object, **kwargs: object) -> str:
            return ""

        def usage(self, ref: ClusterRef) -> list:
            return []

    monkeypatch.setattr(cli_clusters, "_backend", lambda args: Backend())
    code, out, err = _run("status", "x")
    assert code == 0, err
    assert "\x1b" not in out and "\\x1b]0;owned\\x07" in out


def test_status_leads_with_why_a_task_waits_or_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting or failed task shows its reason and then its message (first line,
    bounded, escaped): the words of whoever refused or ended it. A running or succeeded
    task shows its reason only."""
    from airflow_tfk.cli import clusters as cli_clusters
    from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus

    tasks = (
        TaskStatus("worker", 0, Phase.PENDING, "QuotaExceeded", "exceeded quota: team\nsecond line"),
        TaskStatus("worker", 1, Phase.FAILED, "OOMKilled", "x" * 1000 + "\x1b[2J", exit_code=137),
        TaskStatus("worker", 2, Phase.SUCCEEDED, "Completed", "all done", exit_code=0),
    )

    class Backend:
        def owner(self, ref: ClusterRef) -> None:
            return None

        def status(self, ref: ClusterRef) -> ClusterStatus:
            return ClusterStatus(tasks)

        def logs(self, *args: object, **kwargs: object) -> str:
            return ""

        def usage(self, ref: ClusterRef) -> list:
            return []

    monkeypatch.setattr(cli_clusters, "_backend", lambda args: Backend())
    code, out, err = _run("status", "x")
    assert code == 0, err
    assert "worker-0     pending (QuotaExceeded: exceeded quota: team), restarts 0" in out, out
    assert "second line" not in out
    line = next(x for x in out.splitlines() if "worker-1" in x)
    assert line.startswith("  worker-1     failed (OOMKilled: xxx") and len(line) < 400, line
    assert "worker-2     succeeded (Completed), exit code 0, restarts 0" in out
