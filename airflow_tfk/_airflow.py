"""Airflow's task exceptions and configuration, from where the installed Airflow defines them.

Airflow 3.1 (the floor) has them in ``airflow.exceptions`` only, and its task runner
catches those; later versions define them in the Task SDK (``airflow.sdk.exceptions``) and
keep deprecated aliases in ``airflow.exceptions``. Taking the Task SDK's where it exists
and Airflow's own otherwise keeps defer, skip and timeout working on both without a
deprecation warning. Import it inside ``execute`` (parse time stays light).
"""

from __future__ import annotations

try:
    from airflow.sdk.exceptions import AirflowSkipException, AirflowTaskTimeout, TaskDeferred
except ImportError:  # Airflow 3.1 (Task SDK 1.1)
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowSkipException,
        AirflowTaskTimeout,
        TaskDeferred,
    )

__all__ = ["AirflowSkipException", "AirflowTaskTimeout", "TaskDeferred", "default_deferrable"]


def default_deferrable() -> bool:
    """Airflow's ``[operators] default_deferrable``: what a wait does when its DAG says
    nothing, as for the cncf provider's operators, so one setting of the deployment makes
    every waiting task free its worker slot. Read when the operator is built (not when its
    module is imported), so the setting in force at parse time is the one used."""
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 3.1 and 3.2 (the Task SDK has no configuration yet)
        from airflow.configuration import conf  # type: ignore[no-redef, unused-ignore]
    return conf.getboolean("operators", "default_deferrable", fallback=False)
