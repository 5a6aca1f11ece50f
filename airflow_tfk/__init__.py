"""airflow-tfk: distributed TensorFlow on Kubernetes, driven from Apache Airflow.

Public names are loaded lazily, so ``import airflow_tfk`` (and parsing a DAG that uses
it) pulls in neither the Kubernetes client nor TensorFlow nor the template engine.
"""

from __future__ import annotations

from airflow_tfk._lazy import lazy_exports

__version__ = "0.1.0"

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "airflow_tfk.spec": ("TFClusterSpec", "RoleSpec", "Resources", "StorageSpec", "VolumeSpec", "Mode"),
        "airflow_tfk.errors": ("SpecError", "TrainingFailed"),
    },
)
