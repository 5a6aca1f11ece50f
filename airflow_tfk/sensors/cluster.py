"""`TFClusterSensor`: succeeds when the training succeeded, by the cluster's mode.

Fails at once, with the failed task's own reason, when any task failed permanently.
Deferrable mode waits in the triggerer (one watch for the whole cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator

from airflow_tfk._airflow.templated_fields import CheckedTemplateFields
from airflow_tfk.core.constants import PROGRESS_INTERVAL_SECONDS, SENSOR_POKE_INTERVAL_SECONDS
from airflow_tfk.spec import operator_options as args

if TYPE_CHECKING:
    from airflow.sdk import Context


class TFClusterSensor(CheckedTemplateFields, BaseSensorOperator):
    """Wait on the workers (or the chief, in ``parameter_server`` mode) of a cluster.

    :param cluster: the create task's XCom. (templated)
    :param deferrable: wait in the triggerer, holding no worker slot. Default: Airflow's
        ``[operators] default_deferrable``.
    :param progress_interval: seconds between progress lines (step/total/%/ETA).
    :param stall_seconds: fail as stalled when the progress stands still this long while
        the tasks run, naming the silent task(s); 0 turns it off. Default: 10 progress
        intervals, at least 120 s.
    :param release_parameter_servers: deferred, the triggerer ends the roles that never
        exit (the PS) once the training succeeded, after the cluster's grace period, as
        :class:`~airflow_tfk.operators.training.TFTrainingOperator` does: they do not wait
        for this task to resume, or for a clean-up task downstream to run, which a paused
        DAG or a full pool would hold back.
    """

    template_fields: Sequence[str] = ("cluster",)

    def __init__(
        self,
        *,
        cluster: Any,
        deferrable: bool | None = None,
        progress_interval: float = PROGRESS_INTERVAL_SECONDS,
        stall_seconds: float | None = None,
        release_parameter_servers: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", SENSOR_POKE_INTERVAL_SECONDS)
        super().__init__(**kwargs)
        args.cluster_arg(cluster)
        from airflow_tfk._airflow.compat import deferrable_arg

        deferrable = deferrable_arg(deferrable)
        args.waiting_args(deferrable, progress_interval)
        args.bool_arg(release_parameter_servers, "release_parameter_servers")
        self.release_parameter_servers = release_parameter_servers
        self.cluster = cluster
        self.deferrable = deferrable
        self.progress_interval = progress_interval
        self.stall_seconds = args.check_stall_seconds(stall_seconds, progress_interval=progress_interval)
        self._wait: Any = None  # the Wait of the pokes, built on the first

    def execute(self, context: Context) -> Any:
        args.cluster_arg(self.cluster)  # as rendered
        if not self.deferrable:
            return super().execute(context)
        from airflow_tfk.run.handle import ClusterHandle
        from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

        handle = ClusterHandle.from_dict(self.cluster)
        self.defer(
            trigger=TFClusterDoneTrigger.for_handle(
                handle,
                progress_interval=self.progress_interval,
                stall_seconds=self.stall_seconds,
                release_after_success=self.release_parameter_servers,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def poke(self, context: Context) -> bool:
        """One status judged by the wait's own check (:meth:`~airflow_tfk.run.wait.Wait.poke`)."""
        from airflow_tfk._airflow.compat import airflow_error
        from airflow_tfk.run.handle import ClusterHandle
        from airflow_tfk.run.policies import Outcome
        from airflow_tfk.run.wait import Wait, failure_of, run_blocking, wait_result

        handle = ClusterHandle.from_dict(self.cluster)
        if self._wait is None:
            self._wait = Wait.of_handle(
                handle,
                handle.backend(),
                progress_interval=self.progress_interval,
                emit=self.log.info,
                stall_seconds=self.stall_seconds,
            )
        verdict = run_blocking(self._wait.poke())
        if verdict.outcome is Outcome.FAILED:
            error = failure_of(wait_result(verdict), handle.ref.name)
            if error is not None:
                raise airflow_error(error)
        return verdict.outcome is Outcome.SUCCEEDED

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        from airflow_tfk._airflow.compat import airflow_error
        from airflow_tfk.run.wait import failure_of

        error = failure_of(event, str((event.get("cluster") or {}).get("name", "cluster")))
        if error is not None:
            raise airflow_error(error)
        self.log.info("training succeeded: %s", event.get("message", ""))
        if event.get("released") is not None:
            self.log.info(
                "the triggerer ended %s after the success", ", ".join(event["released"]) or "nothing"
            )
