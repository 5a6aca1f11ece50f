"""`airflow-tfk clusters`, Airflow-style: ``-o table|json|yaml|plain``, the backend the
environment names, one line when no kubeconfig exists, an unknown task, ``logs --follow``
and the tasks stopped after a success, on the local backend's real processes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from airflow_tfk.cli import main as cli
from airflow_tfk.core.naming import RunIdentity
from tests.helpers import python_cluster, wait_for

OWNER = RunIdentity("cli_dag", "train", "manual__1", -1)
ROOT = Path(__file__).resolve().parents[2]


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["clusters", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TFK_LOCAL_ROOT", str(tmp_path / "root"))
    # The environment names the backend, as `airflow-tfk airflow` and `env` set it.
    monkeypatch.setenv("TFK_BACKEND", "local")
    return tmp_path / "root"


@pytest.fixture
def sleeper(root: Path):
    from airflow_tfk.backends.local.backend import LocalBackend

    backend = LocalBackend()
    script = "import time; print('hello', flush=True); time.sleep(120)"
    ref = backend.create(python_cluster("out-a", script, workers=2), OWNER)
    try:
        wait_for(lambda: "hello" in backend.logs(ref, "worker", 1), 30, "the workers' first line")
        yield backend, ref
    finally:
        backend.delete(ref)


def test_list_and_status_in_every_output_format(sleeper) -> None:
    """Without --backend, TFK_BACKEND=local picks the local backend; json and yaml parse
    to the same rows, with the owner as data."""
    code, out, err = _run("list", "-o", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows == yaml.safe_load(_run("list", "-o", "yaml")[1])
    (row,) = rows
    assert row["name"] == "out-a" and row["namespace"] == "default" and row["tasks"] == "worker 2 running"
    assert row["owner"] == {"dag_id": "cli_dag", "task_id": "train", "run_id": "manual__1", "map_index": -1}
    assert row["created_at"].endswith("+00:00")

    code, out, _ = _run("list", "-o", "plain")
    header, line = out.splitlines()
    assert header.split() == ["namespace", "name", "age", "tasks", "owner"]
    assert line.split()[:2] == ["default", "out-a"] and "|" not in out

    code, out, _ = _run("status", "out-a", "-o", "json")
    record = json.loads(out)
    again = yaml.safe_load(_run("status", "out-a", "-o", "yaml")[1])
    assert again.pop("usage")["tasks"] == 2  # the seconds so far have moved on
    assert {k: v for k, v in record.items() if k != "usage"} == again
    assert [t["task"] for t in record["tasks"]] == ["worker-0", "worker-1"]
    assert {t["phase"] for t in record["tasks"]} == {"running"} and record["summary"] == "worker 2 running"
    assert record["owner"]["run_id"] == "manual__1" and record["progress"] == "none reported yet"
    # what the two running workers have held so far (python_cluster requests no CPU)
    usage = record["usage"]
    assert usage["tasks"] == 2 and usage["per_role"]["worker"]["seconds"] > 0
    assert usage["total"]["core_seconds"] == 0.0
    text = _run("status", "out-a")[1]
    assert "usage:     0.0000 core-hours" in text and "over 2 task(s) so far" in text


def test_empty_listing_is_still_data(root: Path) -> None:
    assert json.loads(_run("list", "-o", "json")[1]) == []
    assert yaml.safe_load(_run("list", "-A", "-o", "yaml")[1]) == []
    assert _run("list")[1] == "no clusters in namespace default\n"


def test_a_bad_tfk_backend_names_the_variable(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFK_BACKEND", "locale")
    code, out, err = _run("list")
    assert code == 1 and err.startswith("error: TFK_BACKEND: must be 'kubernetes' or 'local'"), err


def test_logs_of_a_task_the_cluster_does_not_have(sleeper) -> None:
    code, out, err = _run("logs", "out-a", "worker-5")
    assert code == 1 and out == ""
    assert err == "error: cluster out-a has no task worker-5 (its tasks: worker-0, worker-1)\n"
    code, out, err = _run("logs", "nothing-here")
    assert code == 1 and "cluster nothing-here not found in namespace default" in err


def test_logs_follow_prints_lines_as_they_come_until_the_task_ends(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.cli import clusters as cli_clusters

    monkeypatch.setattr(cli_clusters, "FOLLOW_INTERVAL_SECONDS", 0.1)
    backend = LocalBackend()
    script = "import time\nfor n in range(12):\n    print('line', n, flush=True); time.sleep(0.2)"
    ref = backend.create(python_cluster("out-f", script), OWNER)
    try:
        wait_for(lambda: "line 2" in backend.logs(ref, "worker", 0), 30, "the first lines")
        t0 = time.monotonic()
        code, out, err = _run("logs", "out-f", "worker-0", "--follow", "--tail", "1")
        assert code == 0, err
        lines = out.splitlines()
        # the last line written before the follow, then every later one, once each
        assert lines[-1] == "line 11" and len(lines) == len(set(lines)) and "line 0" not in lines
        assert lines == [f"line {n}" for n in range(12 - len(lines), 12)]
        assert time.monotonic() - t0 < 20
    finally:
        backend.delete(ref)


def test_tasks_stopped_after_a_success_are_shown_stopped(root: Path) -> None:
    """The chief succeeded; the PS and workers were deleted then (the end of every
    parameter_server run): stopped, not pending with the SIGTERM's exit code 143."""
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.spec.cluster import RoleSpec

    backend = LocalBackend()
    script = "import os, sys, time\nif os.environ['TFK_ROLE'] == 'chief': sys.exit(0)\ntime.sleep(120)"
    spec = python_cluster(
        "out-ps", script, mode="parameter_server", chief=RoleSpec(replicas=1), ps=RoleSpec(replicas=1)
    )
    ref = backend.create(spec, OWNER)
    try:
        wait_for(lambda: "chief 1 succeeded" in backend.status(ref).summary(), 30, "the chief's success")
        backend.delete_roles(ref, ["ps", "worker"])
        wait_for(lambda: "running" not in backend.status(ref).summary(), 30, "the PS and worker gone")
        code, out, err = _run("status", "out-ps")
        assert code == 0, err
        assert "tasks:     chief 1 succeeded; ps 1 stopped; worker 1 stopped" in out, out
        assert "  ps-0         stopped (stopped after the training succeeded), restarts 0" in out, out
        assert "pending" not in out and "143" not in out
        row = json.loads(_run("list", "-o", "json")[1])[0]
        assert row["tasks"] == "chief 1 succeeded; ps 1 stopped; worker 1 stopped"
    finally:
        backend.delete(ref)


def test_without_a_kubeconfig_one_line_names_the_local_backend(tmp_path: Path) -> None:
    """The README's first example on a machine with no Kubernetes: the cause and the fix in
    one line, not the client's traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TFK_", "KUBE"))}
    env.update(HOME=str(tmp_path), AIRFLOW_HOME=str(tmp_path / "airflow"), PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "airflow_tfk.cli.main", "clusters", "list", "-A"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1 and run.stdout == "", run
    (line,) = run.stderr.splitlines()
    assert line.startswith("error: no Kubernetes cluster configured (connection 'kubernetes_default'")
    assert line.endswith("add --backend local (or export TFK_BACKEND=local)"), line


def test_logs_of_a_deleted_cluster_are_still_read(root: Path) -> None:
    """The local backend keeps a deleted cluster's logs: the unknown-task check does not
    hide them, and a cluster that left nothing is still not found."""
    from airflow_tfk.backends.local.backend import LocalBackend

    backend = LocalBackend()
    ref = backend.create(python_cluster("out-gone", "print('kept', flush=True); import time; time.sleep(60)"))
    wait_for(lambda: "kept" in backend.logs(ref, "worker", 0), 30, "the first line")
    backend.delete(ref)
    # the task's output, then the supervisor's word on how it ended
    code, out, err = _run("logs", "out-gone")
    assert (code, err) == (0, "") and out.startswith("kept\n"), out
    assert "[tfk-local] deleted: SIGTERM sent" in out, out
    assert _run("logs", "out-gone", "worker-0") == (0, out, "")
    code, _, err = _run("logs", "out-gone", "worker-3")
    assert code == 1 and err == "error: cluster out-gone not found in namespace default\n"
