"""Settings shared by the example DAGs in dags/, read from the environment at parse time (cheap).

- ``TFK_BACKEND``: ``local`` (default: processes on this machine) or ``kubernetes``.
- ``TFK_KUBERNETES_CONN_ID``: the cncf ``kubernetes`` connection (default ``kubernetes_default``).
- ``TFK_IMAGE``: the training image (built from images/training/Dockerfile).
- ``TFK_NAMESPACE``: where clusters are created on Kubernetes.
- ``TFK_DEFERRABLE``: wait in the triggerer (``true``/``false``).
- ``TFK_API_SERVER_CIDRS``: where the API server's service proxy connects from, comma
  separated (``network_policy.api_server_cidrs`` of TF Serving and TensorBoard); unset:
  discovered from the ``kubernetes`` EndpointSlice in ``default``.

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
# Set only when given (unset keeps the discovery): where the proxy's source is not the
# address the API server advertises (konnectivity, a managed control plane, the real-node
# tier) discovery cannot find it. The serving and TensorBoard specs check the blocks.
_CIDRS = [c.strip() for c in os.environ.get("TFK_API_SERVER_CIDRS", "").split(",") if c.strip()]
PROXY_POLICY: dict = {"network_policy": {"api_server_cidrs": _CIDRS}} if _CIDRS else {}
# The operators' arguments every example DAG shares, as its ``default_args`` (Airflow passes
# each to the operators that take it): where they run, and whether trainings wait in the
# triggerer.
DEFAULT_ARGS = {"backend": BACKEND, "kubernetes_conn_id": KUBERNETES_CONN_ID, "deferrable": DEFERRABLE}
# Existing claims (PVCs on Kubernetes; shared directories with the local backend), so
# models and logs outlive the clusters that wrote them.
STORAGE = {"logs": {"claim": "tfk-logs"}, "models": {"claim": "tfk-models"}}
