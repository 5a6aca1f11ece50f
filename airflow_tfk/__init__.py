"""airflow-tfk: distributed TensorFlow on Kubernetes, driven from Apache Airflow.

Public names are loaded lazily, so ``import airflow_tfk`` (and parsing a DAG that uses
it) pulls in neither the Kubernetes client nor TensorFlow nor the template engine.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "TFClusterSpec": "airflow_tfk.spec",
    "RoleSpec": "airflow_tfk.spec",
    "Resources": "airflow_tfk.spec",
    "StorageSpec": "airflow_tfk.spec",
    "VolumeSpec": "airflow_tfk.spec",
    "Mode": "airflow_tfk.spec",
    "SpecError": "airflow_tfk.errors",
    "TrainingFailed": "airflow_tfk.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'airflow_tfk' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
