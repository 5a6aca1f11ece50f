"""Test-session environment: a throw-away Airflow home (SQLite), no example DAGs, quiet TF
(set at import, before any test module imports Airflow); and the local-backend root the
operator, sensor and trigger tests share (their helpers: tests/helpers.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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


# -- the local-backend root of the operator, sensor and trigger tests ----------------------
# (their helpers are an importable module: tests/helpers.py)


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
