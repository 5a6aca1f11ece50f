"""Airflow's task exceptions, from the module where the installed Airflow defines them.

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

__all__ = ["AirflowSkipException", "AirflowTaskTimeout", "TaskDeferred"]
