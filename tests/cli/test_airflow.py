"""`airflow-tfk airflow ...` and `airflow-tfk env`: the user's DAG folder in a local Airflow.

Runs the real console script and the real `airflow` CLI (SQLite) in a throw-away home.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

DAG = """
import pendulum
from airflow.sdk import DAG, task

with DAG(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    @task
    def hello():
        return 1

    hello()
"""


def run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "airflow-tfk"), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TFK_")) and k != "DAGS_FOLDER"
    }
    env["AIRFLOW_HOME"] = str(tmp_path / "home")
    env["TFK_LOCAL_ROOT"] = str(tmp_path / "tfk-local")
    return env


# slow: a real `airflow db migrate` and two `airflow dags list` runs (~14 CPU-seconds); the
# fast lane runs the same command path without the migration in the next test.
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_runs_the_users_dag_folder_migrating_once_and_saying_where_things_go(tmp_path: Path, clean_env):
    dags = tmp_path / "my_dags"
    dags.mkdir()
    (dags / "mine.py").write_text(DAG.format(dag_id="my_first_dag"))

    first = run(
        ["airflow", "--dags-folder", "my_dags", "dags", "list", "--local", "-o", "json"], clean_env, tmp_path
    )
    assert first.returncode == 0, first.stderr[-3000:]
    assert "preparing the Airflow database" in first.stderr
    assert f"DAGs folder:   {dags}" in first.stderr
    assert f"Airflow home:  {tmp_path / 'home'}" in first.stderr
    assert f"{tmp_path / 'tfk-local'}/<namespace>/<cluster>/" in first.stderr
    listed = json.loads(first.stdout.strip().splitlines()[-1])  # after Airflow's warnings
    assert [d["dag_id"] for d in listed] == ["my_first_dag"]  # only the user's folder, no examples
    assert (tmp_path / "home" / "airflow.db").is_file()

    # DAGS_FOLDER set in the environment is respected; the database is not migrated again.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "theirs.py").write_text(DAG.format(dag_id="from_env"))
    again = run(
        ["airflow", "--quiet", "dags", "list", "--local", "-o", "json"],
        {**clean_env, "DAGS_FOLDER": str(tmp_path / "other")},
        tmp_path,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "preparing" not in again.stderr and "DAGs folder" not in again.stderr
    assert [d["dag_id"] for d in json.loads(again.stdout.strip().splitlines()[-1])] == ["from_env"]


def test_a_migrated_home_goes_straight_to_airflow_with_the_environments_dags_folder(
    tmp_path: Path, clean_env
):
    """The command path of the test above in one real `airflow` run (~4 CPU-seconds): a home
    whose marker names this Airflow version is not migrated again, and $DAGS_FOLDER reaches
    the exec'd `airflow` as its configuration."""
    from importlib.metadata import version

    from airflow_tfk.cli.main import MIGRATED_MARKER

    home = tmp_path / "home"
    home.mkdir()
    (home / MIGRATED_MARKER).write_text(version("apache-airflow") + "\n")
    (tmp_path / "other").mkdir()
    out = run(
        ["airflow", "config", "get-value", "core", "dags_folder"],
        {**clean_env, "DAGS_FOLDER": str(tmp_path / "other")},
        tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "preparing" not in out.stderr
    assert f"DAGs folder:   {tmp_path / 'other'}" in out.stderr
    assert f"Airflow home:  {home}" in out.stderr
    assert out.stdout.strip().splitlines()[-1] == str(tmp_path / "other")
    assert not (home / "airflow.db").exists()  # trusted the marker: no migration


def test_usage_errors_name_the_option(tmp_path: Path, clean_env):
    out = run(["airflow", "--dags-folder", "nowhere", "dags", "list"], clean_env, tmp_path, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: --dags-folder: {tmp_path / 'nowhere'} is not a directory")
    assert not (tmp_path / "home").exists()  # nothing created before the check
    out = run(["airflow"], clean_env, tmp_path, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("error: ARGS:")


def test_env_prints_exports_a_shell_can_eval(tmp_path: Path, clean_env):
    (tmp_path / "d").mkdir()
    script = 'eval "$("$TFK_CLI" env --dags-folder d)"; echo "$AIRFLOW__CORE__DAGS_FOLDER|$AIRFLOW_HOME"'
    out = subprocess.run(
        ["bash", "-c", script],
        env={**clean_env, "TFK_CLI": str(BIN / "airflow-tfk")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{tmp_path / 'd'}|{tmp_path / 'home'}"
