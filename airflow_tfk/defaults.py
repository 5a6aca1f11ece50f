"""Settings shared by the example DAGs in dags/, read from the environment at parse time (cheap).

- ``TFK_BACKEND``: ``local`` (default: processes on this machine) or ``kubernetes``.
- ``TFK_KUBERNETES_CONN_ID``: the cncf ``kubernetes`` connection (default ``kubernetes_default``).
- ``TFK_IMAGE``: the training image (built from images/training/Dockerfile).
- ``TFK_NAMESPACE``: where clusters are created on Kubernetes.
- ``TFK_DEFERRABLE``: wait in the triggerer (``true``/``false``).

Kept in the package (not dags/) so DAG files need nothing on sys.path but airflow_tfk.
"""

from __future__ import annotations

import os

BACKEND = os.environ.get("TFK_BACKEND", "local")
KUBERNETES_CONN_ID = os.environ.get("TFK_KUBERNETES_CONN_ID", "kubernetes_default")
IMAGE = os.environ.get("TFK_IMAGE", "airflow-tfk/training:2.21.0")
NAMESPACE = os.environ.get("TFK_NAMESPACE", "default")
DEFERRABLE = os.environ.get("TFK_DEFERRABLE", "false").lower() in ("1", "true", "yes")
DIGITS_APP = ["python", "-m", "airflow_tfk.runtime.examples.digits_app"]
# Existing claims (PVCs on Kubernetes; shared directories with the local backend), so
# models and logs outlive the clusters that wrote them.
STORAGE = {"logs": {"claim": "tfk-logs"}, "models": {"claim": "tfk-models"}}
