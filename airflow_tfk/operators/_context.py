"""Small bridges from an Airflow task context to this package's plain types."""

from __future__ import annotations

from typing import Any

from airflow_tfk.core.constants import BackendKind
from airflow_tfk.core.naming import RunIdentity


def identity_from_context(context: Any) -> RunIdentity:
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return RunIdentity(ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index)


def backend_config(kind: str, config: dict[str, Any] | None, kubernetes_conn_id: str | None) -> dict:
    out = dict(config or {})
    if kind == BackendKind.KUBERNETES and kubernetes_conn_id and "conn_id" not in out:
        out["conn_id"] = kubernetes_conn_id
    return out
