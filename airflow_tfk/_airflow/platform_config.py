"""The platform team's settings, from the provider's section of Airflow's configuration.

Only the deployment sets these (``airflow.cfg`` or ``AIRFLOW__TFK__<OPTION>``); never a
spec, a training file, Params or conf. Read when a task runs, not when a DAG is parsed.

``[tfk] sweep_root``: the directory sweep studies (SQLite files) live in; on Kubernetes
a volume every Airflow worker mounts. Default: none (the local backend's ``<root>/.sweeps``).
``[tfk] sweep_storage_url_prefixes``: comma-separated database URLs (a server, or a server
and database) a sweep's study may use. Default: none.
``[tfk] prices``: the price table of a training's usage (JSON: ``cpu_core_hour``,
``memory_gib_hour``, ``accelerator_hour``, ``currency``). Default: none (no cost).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_tfk.run.usage import Prices
    from airflow_tfk.spec.platform_policy import PlatformPolicy
    from airflow_tfk.sweep.storage import StoragePolicy

#: the section of Airflow's configuration that holds the platform policy
POLICY_SECTION = "tfk_policy"


def _conf() -> Any:
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 3.1 and 3.2 (the Task SDK has no configuration yet)
        from airflow.configuration import conf  # type: ignore[no-redef, unused-ignore]
    return conf


def sweep_storage_policy() -> StoragePolicy:
    """Where a sweep's study may live, and Airflow's own database, which it may never be."""
    from airflow_tfk.sweep.storage import StoragePolicy  # here: a DAG's parse never asks

    conf = _conf()
    root = conf.get("tfk", "sweep_root", fallback="") or None
    prefixes = conf.get("tfk", "sweep_storage_url_prefixes", fallback="") or ""
    return StoragePolicy(
        root=root.strip() if root and root.strip() else None,
        allowed_url_prefixes=tuple(p.strip() for p in prefixes.split(",") if p.strip()),
        metadata_url=conf.get("database", "sql_alchemy_conn", fallback=None),
    )


def prices() -> Prices | None:
    """The price table of a training's usage, ``[tfk] prices`` (JSON); None when unset.
    A table that is not one is an error naming the option."""
    from airflow_tfk.run.usage import Prices

    return Prices.parse(_conf().get("tfk", "prices", fallback="") or None, field="[tfk] prices")


def platform_policy() -> PlatformPolicy:
    """The platform team's pod policy, from ``[tfk_policy]`` of Airflow's configuration
    (``AIRFLOW__TFK_POLICY__<OPTION>`` too): Pod Security ``restricted`` and no host paths,
    capabilities, ``nodeName``, host ports or tokens when the section says nothing. An
    option the policy does not know is an error naming it, not a setting silently lost."""
    from airflow_tfk.spec.platform_policy import PlatformPolicy

    return PlatformPolicy.from_config(policy_section(), name=POLICY_SECTION)


def policy_section() -> dict[str, Any]:
    """The ``[tfk_policy]`` section as configured (options as written, not yet parsed)."""
    return dict(_conf().getsection(POLICY_SECTION) or {})
