"""`WorkersDoneTrigger`: waits in the triggerer until a training succeeds or fails.

Yields exactly one event with a ``status`` (``success`` | ``failed`` | ``timeout`` |
``error``) instead of raising; the operator turns a non-success event into an exception.
When its task is killed while deferred (mark failed, clear), it deletes the cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_tfk.backends import get_backend
from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.policies import Outcome, evaluate
from airflow_tfk.spec import Mode
from airflow_tfk.watch import ProgressReporter, QueueReporter, progress_task


class WorkersDoneTrigger(BaseTrigger):
    """Wait on a TF cluster without holding a worker slot.

    :param cluster: the cluster reference (``ClusterRef.to_dict()``).
    :param backend_kind: ``kubernetes`` or ``local``.
    :param backend_config: kwargs that rebuild the backend in the triggerer.
    :param mode: the training mode (decides what success is).
    :param replicas: replicas per role.
    :param deadline: absolute UNIX time after which the trigger gives up with ``timeout``
        (the task's ``execution_timeout``); the operator then deletes the cluster.
    :param progress_interval: seconds between progress reads.
    :param delete_on_kill: delete the cluster when the task is killed while deferred.
    """

    def __init__(
        self,
        cluster: dict[str, Any],
        backend_kind: str,
        backend_config: dict[str, Any],
        mode: str,
        replicas: dict[str, int],
        deadline: float | None = None,
        progress_interval: float = 30.0,
        delete_on_kill: bool = True,
    ) -> None:
        super().__init__()
        self.cluster = cluster
        self.backend_kind = backend_kind
        self.backend_config = backend_config
        self.mode = mode
        self.replicas = replicas
        self.deadline = deadline
        self.progress_interval = progress_interval
        self.delete_on_kill = delete_on_kill
        self._fired = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "cluster": self.cluster,
                "backend_kind": self.backend_kind,
                "backend_config": self.backend_config,
                "mode": self.mode,
                "replicas": self.replicas,
                "deadline": self.deadline,
                "progress_interval": self.progress_interval,
                "delete_on_kill": self.delete_on_kill,
            },
        )

    def _backend(self) -> Backend:
        return get_backend(self.backend_kind, **self.backend_config)

    def _event(self, status: str, message: str, **extra: Any) -> TriggerEvent:
        self._fired = True
        return TriggerEvent({"status": status, "message": message, "cluster": self.cluster, **extra})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        ref = ClusterRef.from_dict(self.cluster)
        mode = Mode(self.mode)
        try:
            backend = self._backend()
            role, index = progress_task(mode, self.replicas)
            reporter = ProgressReporter(backend, ref, role, index, self.progress_interval, self.log.info)
            queue = QueueReporter(backend, ref, min(self.progress_interval, 60.0), self.log.info)
            last_summary = ""
            while True:
                window = 60.0
                if self.deadline is not None:
                    window = max(0.0, min(window, self.deadline - time.time()))
                async for status in backend.awatch(ref, timeout=window):
                    summary = status.summary()
                    if summary != last_summary:
                        self.log.info("cluster: %s", summary)
                        last_summary = summary
                    if queue.wants(status):
                        await asyncio.to_thread(queue.report)
                    verdict = evaluate(mode, self.replicas, status)
                    if verdict.outcome is not Outcome.RUNNING:
                        await asyncio.to_thread(reporter.report)
                        failed = verdict.failed_task.to_dict() if verdict.failed_task else None
                        status_word = "success" if verdict.outcome is Outcome.SUCCEEDED else "failed"
                        yield self._event(status_word, verdict.message, failed_task=failed)
                        return
                    if reporter.due():
                        await asyncio.to_thread(reporter.report)
                    if self.deadline is not None and time.time() >= self.deadline:
                        break
                if self.deadline is not None and time.time() >= self.deadline:
                    yield self._event("timeout", "the training exceeded the task's execution_timeout")
                    return
        except Exception as exc:  # reported as an event; the operator raises and cleans up
            self.log.exception("error while waiting on cluster %s", ref.name)
            yield self._event("error", f"{type(exc).__name__}: {exc}")

    async def on_kill(self) -> None:
        """Airflow >= 3.3 calls this when the user kills the deferred task."""
        if self._fired or not self.delete_on_kill:
            return
        ref = ClusterRef.from_dict(self.cluster)
        self.log.info("task killed while deferred: deleting cluster %s", ref.name)
        await self._backend().adelete(ref)

    async def cleanup(self) -> None:
        """Before Airflow 3.3 there is no trigger ``on_kill``: delete only if the task left
        the deferred state (a triggerer restart keeps it deferred and the cluster alive)."""
        if self._fired or not self.delete_on_kill or _airflow_has_trigger_on_kill():
            return
        try:
            state = await asyncio.to_thread(self._task_state)
        except Exception:
            self.log.warning("cannot read the task state; keeping the cluster", exc_info=True)
            return
        if state is not None and state != "deferred":
            await self.on_kill()

    def _task_state(self) -> str | None:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        ti = self.task_instance
        if ti is None:  # not bound to a task instance (e.g. run outside the triggerer)
            return None
        states = RuntimeTaskInstance.get_task_states(
            dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=ti.map_index
        )
        key = f"{ti.task_id}_{ti.map_index}" if ti.map_index >= 0 else ti.task_id
        return states.get(ti.run_id, {}).get(key)


def _airflow_has_trigger_on_kill() -> bool:
    from airflow import __version__

    major, minor = (int(x) for x in __version__.split(".")[:2])
    return (major, minor) >= (3, 3)
