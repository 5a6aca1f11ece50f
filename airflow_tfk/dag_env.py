"""What DAG files (the example DAGs, the training files) read from the environment.

Each value falls back to :mod:`airflow_tfk.core.constants`, the one table of defaults; the
environment only overrides it, so an unset variable means the provider's default:

- ``TFK_BACKEND``: ``kubernetes`` (default) or ``local`` (processes on this machine;
  ``airflow-tfk airflow`` sets it for a local Airflow unless it is already set).
- ``TFK_KUBERNETES_CONN_ID``: the cncf ``kubernetes`` connection.
- ``TFK_IMAGE``: the training image (built from images/training/Dockerfile).
- ``TFK_NAMESPACE``: where clusters are created on Kubernetes.
- ``TFK_API_SERVER_CIDRS``: where the API server's service proxy connects from, comma
  separated (``network_policy.api_server_cidrs`` of TF Serving and TensorBoard); unset:
  discovered from the ``kubernetes`` EndpointSlice in ``default``.

Whether trainings wait in the triggerer is Airflow's own setting,
``[operators] default_deferrable`` (``AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE``).

Kept in the package (not dags/) so DAG files need nothing on sys.path but airflow_tfk.
Read once at import, which is cheap: no client, no template.
"""

from __future__ import annotations

import os

from airflow_tfk.core import constants

BACKEND = constants.backend_kind(os.environ.get("TFK_BACKEND") or constants.BACKEND, "TFK_BACKEND").value
KUBERNETES_CONN_ID = os.environ.get("TFK_KUBERNETES_CONN_ID") or constants.KUBERNETES_CONN_ID
IMAGE = os.environ.get("TFK_IMAGE") or constants.IMAGE
NAMESPACE = os.environ.get("TFK_NAMESPACE") or constants.NAMESPACE
DIGITS_APP = ["python", "-m", "airflow_tfk.runtime.examples.digits_app"]
# Set only when given (unset keeps the discovery): where the proxy's source is not the
# address the API server advertises (konnectivity, a managed control plane, the real-node
# tier) discovery cannot find it. The serving and TensorBoard specs check the blocks.
_CIDRS = [c.strip() for c in os.environ.get("TFK_API_SERVER_CIDRS", "").split(",") if c.strip()]
PROXY_POLICY: dict = {"network_policy": {"api_server_cidrs": _CIDRS}} if _CIDRS else {}
# The operators' arguments every example DAG shares, as its ``default_args`` (Airflow passes
# each to the operators that take it).
DEFAULT_ARGS = {"backend": BACKEND, "kubernetes_conn_id": KUBERNETES_CONN_ID}
STORAGE = {"logs": {"claim": constants.LOGS_CLAIM}, "models": {"claim": constants.MODELS_CLAIM}}
