"""Test-session environment: a throw-away Airflow home (SQLite), no example DAGs, quiet TF
(set at import, before any test module imports Airflow); and the fixtures the operator,
sensor and trigger tests share: a local-backend root and a stand-in training task.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

_HOME = tempfile.mkdtemp(prefix="tfk-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault(
    "AIRFLOW__CORE__DAGS_FOLDER", os.path.join(os.path.dirname(os.path.dirname(__file__)), "dags")
)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TFK_LOCAL_ROOT", os.path.join(_HOME, "tfk-local"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the throw-away Airflow home (kept when a test failed, for its logs)."""
    import shutil

    if exitstatus == 0 and os.environ.get("AIRFLOW_HOME") == _HOME:
        shutil.rmtree(_HOME, ignore_errors=True)


# -- shared fixtures of the operator, sensor and trigger tests ---------------------------


ROOT = Path(__file__).resolve().parents[1]
TRAINER = str(Path(__file__).parent / "operators" / "tasks" / "trainer.py")


def task_context(
    run_id: str = "manual__1", dag_id: str = "dag", task_id: str = "train", map_index: int = -1
) -> dict:
    """The part of an Airflow context the operators read: the task instance identity."""
    return {
        "ti": SimpleNamespace(
            dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index, try_number=1
        )
    }


def spec_dict(mode: str = "between_graph", workers: int = 2, **env: str) -> dict:
    spec = {
        "image": "local/unused:1",
        "mode": mode,
        "command": ["python", TRAINER],
        "worker": {"replicas": workers},
        "env": {"REPO_DIR": str(ROOT), **env},
        "ps_grace_seconds": 0,
    }
    if mode != "all_reduce":
        spec["ps"] = {"replicas": 1}
    if mode == "parameter_server":
        spec["chief"] = {"replicas": 1}
    return spec


def cluster_processes(root: Path) -> list[int]:
    """Live processes started for any cluster under ``root`` (supervisors carry it in argv)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(root) in part for part in p.info["cmdline"] or ()):
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p.pid)
        except psutil.Error:
            pass
    return found


def assert_no_processes(root: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while cluster_processes(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster_processes(root) == []


@pytest.fixture
def local_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "tfk-local"
    monkeypatch.setenv("TFK_LOCAL_ROOT", str(root))
    yield root
    from airflow_tfk.backends.local import LocalBackend

    backend = LocalBackend(str(root))
    for state in root.glob("*/*/state.json"):
        from airflow_tfk.backends.base import ClusterRef

        backend.delete(ClusterRef(state.parent.name, state.parent.parent.name))


@pytest.fixture
def ns() -> SimpleNamespace:
    return SimpleNamespace(
        task_context=task_context,
        spec_dict=spec_dict,
        assert_no_processes=assert_no_processes,
        cluster_processes=cluster_processes,
    )
