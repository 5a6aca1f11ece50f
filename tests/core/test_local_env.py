"""Where `airflow-tfk airflow` puts things: the user's choices win, then the project's defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_tfk.core.local_env import checkout_root, resolve

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_checkouts_folders():
    assert checkout_root() == ROOT
    where = resolve({"PATH": "/usr/bin"})
    assert where.airflow_home == ROOT / ".airflow-home"
    assert where.dags_folder == ROOT / "dags"
    assert where.local_root == ROOT / ".tfk-local"
    env = where.environ({"PATH": "/usr/bin"})
    assert env["PATH"] == f"{Path(sys.executable).parent}{os.pathsep}/usr/bin"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(ROOT / "dags")
    assert env["TFK_LOCAL_ROOT"] == str(ROOT / ".tfk-local")
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    # a local Airflow is where the local backend is chosen (the provider's default is Kubernetes)
    assert env["TFK_BACKEND"] == "local"


def test_the_users_environment_wins_and_relative_paths_are_taken_from_cwd(tmp_path: Path):
    env = {
        "AIRFLOW_HOME": "home",
        "DAGS_FOLDER": "plain",
        "TFK_LOCAL_ROOT": str(tmp_path / "state"),
        "TF_CPP_MIN_LOG_LEVEL": "0",
        "TFK_BACKEND": "kubernetes",
    }
    where = resolve(env, cwd=str(tmp_path))
    assert where.airflow_home == tmp_path / "home"
    assert where.dags_folder == tmp_path / "plain"  # DAGS_FOLDER counts
    assert where.local_root == tmp_path / "state"
    assert where.environ(env)["TF_CPP_MIN_LOG_LEVEL"] == "0"
    assert where.environ(env)["TFK_BACKEND"] == "kubernetes"
    # Airflow's own variable beats the plain one; the command-line option beats both.
    env["AIRFLOW__CORE__DAGS_FOLDER"] = "airflows"
    assert resolve(env, cwd=str(tmp_path)).dags_folder == tmp_path / "airflows"
    assert resolve(env, cwd=str(tmp_path), dags_folder="mine").dags_folder == tmp_path / "mine"


def test_describe_says_where_state_logs_and_models_go(tmp_path: Path):
    lines = "\n".join(resolve({"TFK_LOCAL_ROOT": str(tmp_path)}).describe())
    assert f"{tmp_path}/<namespace>/<cluster>/" in lines
    assert "logs/<role>-<index>.log" in lines
    assert f"{tmp_path}/<namespace>/.claims/<claim>/<model>/<version>/" in lines
    assert "airflow.db" in lines


def test_airflow_env_sh_keeps_a_dags_folder_the_user_set(tmp_path: Path):
    def sourced(extra: dict[str, str]) -> str:
        env = {k: v for k, v in os.environ.items() if "DAGS_FOLDER" not in k}
        out = subprocess.run(
            ["bash", "-c", 'source scripts/airflow-env.sh && echo "$AIRFLOW__CORE__DAGS_FOLDER"'],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    assert sourced({}) == str(ROOT / "dags")
    assert sourced({"AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path)}) == str(tmp_path)
    assert sourced({"DAGS_FOLDER": str(tmp_path / "x")}) == str(tmp_path / "x")


def test_one_local_root_for_the_backend_the_servers_the_stop_command_and_airflow_tfk_airflow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without TFK_LOCAL_ROOT, every reader of the local root gives the same answer as the
    environment `airflow-tfk airflow` sets up: a server one started, another can find."""
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.core import local_env
    from airflow_tfk.serving import local as serving_local

    monkeypatch.delenv("TFK_LOCAL_ROOT", raising=False)
    expected = str(local_env.resolve({}).local_root)
    assert local_env.checkout_root() is not None  # the tests run from the checkout
    assert expected == str(ROOT / ".tfk-local")
    assert LocalBackend().root == expected
    assert serving_local.default_root() == expected
    monkeypatch.setenv("TFK_LOCAL_ROOT", "/srv/tfk")
    assert (
        LocalBackend().root
        == serving_local.default_root()
        == str(local_env.resolve().local_root)
        == "/srv/tfk"
    )
