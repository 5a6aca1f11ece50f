"""Test-session environment: a throw-away Airflow home (SQLite), no example DAGs, quiet TF.

Set at import, before any test module imports Airflow.
"""

from __future__ import annotations

import os
import tempfile

_HOME = tempfile.mkdtemp(prefix="tfk-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER",
                      os.path.join(os.path.dirname(os.path.dirname(__file__)), "dags"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TFK_LOCAL_ROOT", os.path.join(_HOME, "tfk-local"))
