"""`TFWorkersSensor`: succeeds when the training succeeded, by the cluster's mode.

Fails at once, with the failed task's own reason, when any task failed permanently.
Deferrable mode waits in the triggerer (one watch for the whole cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class TFWorkersSensor(BaseSensorOperator):
    """Wait on the workers (or the chief, in ``parameter_server`` mode) of a cluster.

    :param cluster: the create task's XCom. (templated)
    :param deferrable: wait in the triggerer, holding no worker slot.
    :param progress_interval: seconds between progress lines (step/total/%/ETA).
    """

    template_fields: Sequence[str] = ("cluster",)

    def __init__(
        self, *, cluster: Any, deferrable: bool = False, progress_interval: float = 30.0, **kwargs: Any
    ) -> None:
        kwargs.setdefault("poke_interval", 10)
        super().__init__(**kwargs)
        self.cluster = cluster
        self.deferrable = deferrable
        self.progress_interval = progress_interval
        self._reporter: Any = None

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from airflow_tfk.handle import ClusterHandle
        from airflow_tfk.triggers.workers import WorkersDoneTrigger

        handle = ClusterHandle.from_dict(self.cluster)
        self.defer(
            trigger=WorkersDoneTrigger(
                cluster=handle.ref.to_dict(),
                backend_kind=handle.backend_kind,
                backend_config=handle.backend_config,
                mode=handle.mode.value,
                replicas=handle.replicas,
                progress_interval=self.progress_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def poke(self, context: Context) -> bool:
        from airflow_tfk.errors import TrainingFailed
        from airflow_tfk.handle import ClusterHandle
        from airflow_tfk.policies import Outcome, evaluate
        from airflow_tfk.watch import ProgressReporter, progress_task

        handle = ClusterHandle.from_dict(self.cluster)
        backend = handle.backend()
        if self._reporter is None:
            role, index = progress_task(handle.mode, handle.replicas)
            self._reporter = ProgressReporter(
                backend, handle.ref, role, index, self.progress_interval, self.log.info
            )
        status = backend.status(handle.ref)
        self.log.info("cluster %s: %s", handle.ref.name, status.summary())
        verdict = evaluate(handle.mode, handle.replicas, status)
        if verdict.outcome is Outcome.FAILED:
            task = verdict.failed_task
            raise TrainingFailed(
                task.name if task else handle.ref.name, task.reason if task else "Deleted", verdict.message
            )
        if self._reporter.due() or verdict.outcome is Outcome.SUCCEEDED:
            self._reporter.report()
        return verdict.outcome is Outcome.SUCCEEDED

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        from airflow_tfk.errors import TrainingFailed

        if event.get("status") == "success":
            self.log.info("training succeeded: %s", event.get("message", ""))
            return
        task = event.get("failed_task") or {}
        raise TrainingFailed(
            f"{task.get('role', 'cluster')}-{task.get('index', 0)}" if task else event["cluster"]["name"],
            task.get("reason") or event.get("status", "error"),
            event.get("message", ""),
        )
