"""`TFClusterDoneTrigger`: waits in the triggerer until a training succeeds or fails.

Yields exactly one event with a ``status`` (``success`` | ``failed`` | ``timeout`` |
``error``) instead of raising; the operator turns a non-success event into an exception.
When its task is killed while deferred (mark failed, clear), it deletes the cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_tfk.backends import get_backend
from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.core.constants import PROGRESS_INTERVAL_SECONDS
from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.forecast import ForecastAlert, from_state
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.run.usage import Usage
from airflow_tfk.run.wait import Wait, wait_result
from airflow_tfk.spec import operator_options as args
from airflow_tfk.spec.cluster import Mode


def _check(
    cluster: object,
    backend_kind: object,
    backend_config: object,
    mode: object,
    replicas: object,
    deadline: object,
    progress_interval: object,
    delete_on_kill: object,
    owner: object = None,
    forecasts: object = None,
) -> None:
    """The trigger's arguments (a serialized trigger is data too), each naming itself."""
    args.cluster_arg(cluster)
    if not isinstance(backend_kind, str) or backend_kind not in args.BACKEND_OPTIONS:
        raise SpecError("backend_kind", "must be 'kubernetes' or 'local'", backend_kind)
    if not isinstance(backend_config, Mapping):
        raise SpecError("backend_config", "must be a mapping", backend_config)
    args.backend_config_arg(backend_config, backend_kind)
    if mode not in {m.value for m in Mode}:
        raise SpecError("mode", f"must be one of {', '.join(m.value for m in Mode)}", mode)
    args.str_map_of_ints(replicas, "replicas")
    args.number_arg(deadline, "deadline", lo=0, hi=2**40, optional=True)
    args.number_arg(progress_interval, "progress_interval", lo=0.1, hi=86400)
    args.bool_arg(delete_on_kill, "delete_on_kill")
    if forecasts is not None:
        if not isinstance(forecasts, list) or len(forecasts) > 4:
            raise SpecError("forecasts", "must be a list of forecast states", forecasts)
        for state in forecasts:
            args.forecast_arg(state)
    if owner is not None:
        try:
            RunIdentity.from_dict(owner)  # type: ignore[arg-type]
        except Exception as exc:
            raise SpecError("owner", f"must be a task instance identity ({exc})", owner) from None


class TFClusterDoneTrigger(BaseTrigger):
    """Wait on a TF cluster without holding a worker slot.

    :param cluster: the cluster reference (``ClusterRef.to_dict()``).
    :param backend_kind: ``kubernetes`` or ``local``.
    :param backend_config: kwargs that rebuild the backend in the triggerer.
    :param mode: the training mode (decides what success is).
    :param replicas: replicas per role.
    :param deadline: absolute UNIX time after which the trigger gives up with ``timeout``
        (the task's ``execution_timeout``); the operator then deletes the cluster.
    :param progress_interval: seconds between progress reads.
    :param stall_seconds: fail as stalled after this long without progress (0: off).
    :param delete_on_kill: delete the cluster when the task is killed while deferred.
    :param owner: the task instance the cluster belongs to (``RunIdentity.to_dict()``;
        None: created outside Airflow): a kill ends only a cluster that is still its.
    :param release_handle: the cluster's handle (``ClusterHandle.to_dict()``) when this
        trigger ends the roles that never exit by themselves (the PS) after a success,
        after the handle's grace period. It does so here, in the triggerer, so they do not
        wait for a free worker slot, or for the DAG to be unpaused, to resume the task; the
        event's ``released`` lists the roles it deleted.
    :param forecasts: the deadline's and the budget's forecast states (their
        ``to_dict()``). One with ``hand_over`` ends this trigger on its alert with a
        ``forecast`` event (the alert under ``forecast``, every forecast's state under
        ``forecasts``): the task runs the DAG's callback, then acts or waits again;
        without, the alert is a line of the triggerer's log, and a stop a failed event.
    """

    def __init__(
        self,
        cluster: dict[str, Any],
        backend_kind: str,
        backend_config: dict[str, Any],
        mode: str,
        replicas: dict[str, int],
        deadline: float | None = None,
        progress_interval: float = PROGRESS_INTERVAL_SECONDS,
        delete_on_kill: bool = True,
        release_handle: dict[str, Any] | None = None,
        stall_seconds: float | None = None,
        max_lost_workers: int = 0,
        owner: dict[str, Any] | None = None,
        forecasts: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        # Checked here, reported by run() as its one event (a trigger yields, it does not
        # raise: the triggerer builds it from serialized data); for_handle raises it at once.
        self.invalid: SpecError | None = None
        try:
            _check(
                cluster,
                backend_kind,
                backend_config,
                mode,
                replicas,
                deadline,
                progress_interval,
                delete_on_kill,
                owner,
                forecasts,
            )
        except SpecError as exc:
            self.invalid = exc
        self.cluster = cluster
        self.backend_kind = backend_kind
        self.backend_config = backend_config
        self.mode = mode
        self.replicas = replicas
        self.deadline = deadline
        self.progress_interval = progress_interval
        self.delete_on_kill = delete_on_kill
        self.release_handle = release_handle
        self.stall_seconds = stall_seconds
        self.max_lost_workers = max_lost_workers
        self.owner = owner
        self.forecasts = forecasts
        self._fired = False

    @classmethod
    def for_handle(
        cls,
        handle: ClusterHandle,
        *,
        deadline: float | None = None,
        progress_interval: float,
        release_after_success: bool = False,
        stall_seconds: float | None = None,
        forecasts: list[dict[str, Any]] | None = None,
    ) -> TFClusterDoneTrigger:
        """The trigger that waits on the cluster of ``handle`` (a create task's XCom);
        with ``release_after_success`` it also ends the PS after a success. Raises
        SpecError, naming the argument, when one is invalid."""
        trigger = cls(
            cluster=handle.ref.to_dict(),
            backend_kind=handle.backend_kind,
            backend_config=handle.backend_config,
            mode=handle.mode.value,
            replicas=handle.replicas,
            deadline=deadline,
            progress_interval=progress_interval,
            release_handle=handle.to_dict() if release_after_success else None,
            stall_seconds=stall_seconds,
            max_lost_workers=handle.max_lost_workers,
            owner=handle.owner.to_dict() if handle.owner is not None else None,
            forecasts=forecasts,
        )
        if trigger.invalid is not None:
            raise trigger.invalid
        return trigger

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
                "release_handle": self.release_handle,
                "stall_seconds": self.stall_seconds,
                "max_lost_workers": self.max_lost_workers,
                "owner": self.owner,
                "forecasts": self.forecasts,
            },
        )

    def _backend(self) -> Backend:
        return get_backend(self.backend_kind, **self.backend_config)

    def _prepare(self) -> Backend:
        """The backend, built in a thread: its modules and the ones the trigger's end
        imports take seconds to load on a busy triggerer, which must not stall its loop."""
        import airflow_tfk.run.ending
        import airflow_tfk.run.policies  # noqa: F401

        return self._backend()

    def _event(self, status: str, message: str, **extra: Any) -> TriggerEvent:
        self._fired = True
        return TriggerEvent({"status": status, "message": message, "cluster": self.cluster, **extra})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.invalid is not None:
            yield self._event("error", f"{type(self.invalid).__name__}: {self.invalid}")
            return
        ref = ClusterRef.from_dict(self.cluster)
        forecasts = tuple(from_state(f, emit=self.log.info) for f in self.forecasts or ())
        try:
            backend = await asyncio.to_thread(self._prepare)
            wait = Wait(
                backend,
                ref,
                Mode(self.mode),
                self.replicas,
                deadline=self.deadline,
                progress_interval=self.progress_interval,
                emit=self.log.info,
                stall_seconds=self.stall_seconds,
                max_lost_workers=self.max_lost_workers,
                forecasts=forecasts,
            )
            result = wait_result(await wait.run())
        except ForecastAlert as alert:
            states = [f.to_dict() for f in forecasts]
            yield self._event("forecast", str(alert.info["message"]), forecast=alert.info, forecasts=states)
            return
        except Exception as exc:  # reported as an event; the operator raises and cleans up
            self.log.exception("error while waiting on cluster %s", ref.name)
            yield self._event("error", f"{type(exc).__name__}: {exc}")
            return
        if result["status"] == "timeout":
            yield self._event("timeout", result["message"])
            return
        extra: dict[str, Any] = {}
        if result["status"] == "success" and self.release_handle is not None:
            try:
                extra["released"], usage = await self._release(ClusterHandle.from_dict(self.release_handle))
                if usage is not None:  # read before the PS went: the task's own read misses them
                    extra["usage"] = usage.to_event()
            except Exception:  # the resumed task cleans up as the blocking path does
                self.log.exception("could not end the PS of cluster %s here", ref.name)
        yield self._event(result["status"], result["message"], failed_task=result["failed_task"], **extra)

    async def _release(self, handle: ClusterHandle) -> tuple[list[str], Usage | None]:
        """The blocking path's clean-up after success, with the grace period awaited here
        rather than slept in a thread of the triggerer."""
        from airflow_tfk.run.ending import Remove, RunResult, end_run
        from airflow_tfk.run.policies import roles_after_success

        roles = roles_after_success(handle.mode, list(handle.replicas))
        if roles and handle.ps_grace_seconds > 0:
            self.log.info(
                "training succeeded; deleting %s in %d s (from the triggerer)",
                ", ".join(roles),
                handle.ps_grace_seconds,
            )
            await asyncio.sleep(handle.ps_grace_seconds)
        ended = await asyncio.to_thread(
            end_run,
            handle,
            "the training succeeded (released from the triggerer)",
            result=RunResult.ACCEPTED,
            remove=Remove.LEFTOVERS,
            emit=self.log.info,
            grace_seconds=0,
        )
        return list(ended.removed), ended.usage

    async def on_kill(self) -> None:
        """Airflow >= 3.3 calls this when the user kills the deferred task. The cluster
        ends as a killed run does: only if it is still its owner's, its exports set aside."""
        if self._fired or not self.delete_on_kill or self.invalid is not None:
            return
        from airflow_tfk.run.ending import end_run

        handle = ClusterHandle(
            ClusterRef.from_dict(self.cluster),
            self.backend_kind,
            dict(self.backend_config),
            Mode(self.mode),
            dict(self.replicas),
            owner=RunIdentity.from_dict(self.owner) if self.owner else None,
            max_lost_workers=self.max_lost_workers,
        )
        self.log.info("task killed while deferred: ending cluster %s", handle.ref.name)
        await asyncio.to_thread(end_run, handle, "its task was killed while deferred", emit=self.log.info)

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
