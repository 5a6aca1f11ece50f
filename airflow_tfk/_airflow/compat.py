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

from airflow_tfk.core.errors import SpecError

__all__ = [
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "TaskDeferred",
    "airflow_error",
    "default_deferrable",
    "deferrable_arg",
]


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


def deferrable_arg(value: object) -> bool:
    """``deferrable`` as given, or Airflow's ``[operators] default_deferrable`` for None."""
    if value is None:
        return default_deferrable()
    if not isinstance(value, bool):
        raise SpecError("deferrable", "must be true or false", value)
    return value


def airflow_error(error: BaseException) -> BaseException:
    """The exception a task raises for ``error``: the wait's own timeout
    (:class:`~airflow_tfk.core.errors.WaitTimedOut`, raised below the Airflow face) becomes
    Airflow's ``AirflowTaskTimeout``, so a task past its deadline is a timeout to Airflow
    too (no retry of a training that cannot finish in time); anything else is itself."""
    from airflow_tfk.core.errors import WaitTimedOut

    if isinstance(error, WaitTimedOut):
        return AirflowTaskTimeout(str(error))
    return error
