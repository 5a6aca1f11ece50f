"""The platform team's settings, from the provider's section of Airflow's configuration.

Only the deployment sets these (``airflow.cfg`` or ``AIRFLOW__TFK__<OPTION>``); never a
spec, a training file, Params or conf. Read when a task runs, not when a DAG is parsed.

``[tfk] sweep_root``: the directory sweep studies (SQLite files) live in; on Kubernetes
a volume every Airflow worker mounts. Default: none (the local backend's ``<root>/.sweeps``).
``[tfk] sweep_storage_url_prefixes``: comma-separated database URLs (a server, or a server
and database) a sweep's study may use. Default: none.
"""

from __future__ import annotations

from typing import Any

from airflow_tfk.sweep.storage import StoragePolicy


def _conf() -> Any:
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 3.1 and 3.2 (the Task SDK has no configuration yet)
        from airflow.configuration import conf  # type: ignore[no-redef, unused-ignore]
    return conf


def sweep_storage_policy() -> StoragePolicy:
    """Where a sweep's study may live, and Airflow's own database, which it may never be."""
    conf = _conf()
    root = conf.get("tfk", "sweep_root", fallback="") or None
    prefixes = conf.get("tfk", "sweep_storage_url_prefixes", fallback="") or ""
    return StoragePolicy(
        root=root.strip() if root and root.strip() else None,
        allowed_url_prefixes=tuple(p.strip() for p in prefixes.split(",") if p.strip()),
        metadata_url=conf.get("database", "sql_alchemy_conn", fallback=None),
    )
