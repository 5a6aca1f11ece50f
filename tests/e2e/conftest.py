"""A real Airflow (SQLite) for end-to-end tests: `airflow dags test` in a subprocess.

The Airflow home and the local backend's state live in a per-session temporary
directory; the DAGs folder is the repository's ``dags/``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import dags_test, migrated_airflow_home

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@dataclass
class AirflowEnv:
    home: Path
    local_root: Path
    env: dict[str, str]

    def dags_test(
        self,
        dag_id: str,
        conf: str | None = None,
        timeout: float = 600,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return dags_test({**self.env, **(extra_env or {})}, dag_id, conf=conf, timeout=timeout)


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    base = tmp_path_factory.mktemp("airflow")
    home, local_root = base / "home", base / "tfk-local"
    home.mkdir()
    # The example DAGs as `airflow-tfk airflow` runs them: the local backend, chosen by name.
    env = migrated_airflow_home(
        home, TFK_BACKEND="local", TFK_LOCAL_ROOT=str(local_root), TF_CPP_MIN_LOG_LEVEL="2"
    )
    yield AirflowEnv(home, local_root, env)
