"""`TFTrainingOperator`: create the cluster, wait on it, clean up - in one task.

Kill-safe: an exception, ``execution_timeout`` (blocking or deferred), ``on_kill`` (mark
failed, ``dagrun_timeout``) and a failed training all delete the cluster after copying
the failed tasks' logs. A retry or a restarted task reattaches to its cluster (the name
is deterministic) or replaces it if it failed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_tfk.operators._context import backend_config, identity_from_context
from airflow_tfk.operators.tensorboard import TensorBoardLink

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tfk.handle import ClusterHandle
    from airflow_tfk.spec import TFClusterSpec

# The trigger's own deadline fires first; Airflow's defer timeout is only a backstop.
_DEFER_TIMEOUT_MARGIN = timedelta(minutes=5)


class TFTrainingOperator(BaseOperator):
    """Run one distributed TensorFlow training from start to clean-up.

    :param cluster_spec: the cluster: a ``TFClusterSpec``, a mapping of its fields, or YAML
        text; without ``name`` it is derived from the task instance. (templated)
    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options. (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :param deferrable: wait in the triggerer, holding no worker slot.
    :param cleanup: after success, delete ``ps`` (the roles that never exit, after the
        grace period) or ``all`` (the whole cluster; logs are copied first).
    :param progress_interval: seconds between progress lines (step/total/%/ETA).
    :param tensorboard_task_id: the TensorBoard task whose URL the "TensorBoard" extra
        link of this task opens.
    :param previous_run_policy: what to do with a still-alive cluster of an earlier run of
        this task: ``allow`` (default), ``kill_previous``, ``skip`` or ``wait``.
    :return: (XCom) the cluster handle plus ``outcome``.

    Maximum duration: set ``execution_timeout`` (Airflow side; also enforced while
    deferred) and the spec's ``max_duration_seconds`` (cluster side, ``activeDeadlineSeconds``).
    """

    template_fields: Sequence[str] = ("cluster_spec", "backend_config", "previous_run_policy")
    ui_color = "#ff6f00"
    operator_extra_links = (TensorBoardLink(),)

    def __init__(
        self,
        *,
        cluster_spec: TFClusterSpec | Mapping[str, Any] | str,
        backend: str = "kubernetes",
        backend_config: dict[str, Any] | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = False,
        cleanup: str = "ps",
        progress_interval: float = 30.0,
        name_prefix: str = "tfk",
        previous_run_policy: str = "allow",
        tensorboard_task_id: str = "tensorboard",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if cleanup not in ("ps", "all"):
            raise ValueError(f"cleanup: must be 'ps' or 'all' (got {cleanup!r})")
        self.previous_run_policy = previous_run_policy
        self.tensorboard_task_id = tensorboard_task_id
        if "{{" not in previous_run_policy:
            _previous_run_policy(previous_run_policy)
        self.cluster_spec = cluster_spec
        self.backend = backend
        self.backend_config = backend_config
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.cleanup = cleanup
        self.progress_interval = progress_interval
        self.name_prefix = name_prefix
        self._handle: ClusterHandle | None = None

    # -- the steps --------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        from airflow.sdk.exceptions import TaskDeferred

        from airflow_tfk.handle import ClusterHandle
        from airflow_tfk.lifecycle import (
            apply_previous_run_policy,
            create_or_reattach,
        )
        from airflow_tfk.watch import wait_for_cluster

        identity, spec, backend = self._resolve(context)
        handle = ClusterHandle.for_spec(spec, backend)
        wait_limit = self.execution_timeout.total_seconds() if self.execution_timeout else None
        policy = _previous_run_policy(self.previous_run_policy)
        if not apply_previous_run_policy(
            backend, spec, identity, policy, self.log.info, wait_timeout=wait_limit
        ):
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(
                "an earlier run of this training is still alive (previous_run_policy=skip)"
            )
        self._handle = handle
        try:
            create_or_reattach(backend, spec, identity, self.log.info)
            if self.deferrable:
                self._defer(handle)
            verdict = wait_for_cluster(
                backend,
                handle.ref,
                handle.mode,
                handle.replicas,
                progress_interval=self.progress_interval,
                emit=self.log.info,
            )
        except TaskDeferred:
            raise
        except BaseException:
            # Includes AirflowTaskTimeout and SIGTERM-driven exits: nothing may be left.
            self._teardown(handle, "the task stopped before the training finished")
            raise
        return self._finish(handle, verdict.outcome.value, verdict.message, verdict.failed_task)

    def _defer(self, handle: ClusterHandle) -> None:
        from airflow_tfk.triggers.workers import WorkersDoneTrigger

        deadline = None
        timeout = None
        if self.execution_timeout is not None:
            deadline = time.time() + self.execution_timeout.total_seconds()
            timeout = self.execution_timeout + _DEFER_TIMEOUT_MARGIN
        self.defer(
            trigger=WorkersDoneTrigger(
                cluster=handle.ref.to_dict(),
                backend_kind=handle.backend_kind,
                backend_config=handle.backend_config,
                mode=handle.mode.value,
                replicas=handle.replicas,
                deadline=deadline,
                progress_interval=self.progress_interval,
            ),
            method_name="execute_complete",
            kwargs={"handle": handle.to_dict()},
            timeout=timeout,
        )

    def execute_complete(
        self, context: Context, event: dict[str, Any], handle: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        from airflow_tfk.handle import ClusterHandle
        from airflow_tfk.status import TaskStatus

        if handle is None:
            # `airflow dags test` (3.3) resumes with the event only, dropping the defer
            # kwargs; the handle is deterministic, so build it again.
            handle = self._handle_of(context).to_dict()
        h = ClusterHandle.from_dict(handle)
        self._handle = h
        status = str(event.get("status") or "error")
        failed = event.get("failed_task")
        outcome = {"success": "succeeded", "failed": "failed"}.get(status, status)
        return self._finish(
            h, outcome, str(event.get("message", "")), TaskStatus.from_dict(failed) if failed else None
        )

    def _resolve(self, context: Context) -> tuple[Any, TFClusterSpec, Any]:
        """Identity, validated spec and backend of this task instance (deterministic, so a
        resumed or retried task finds the same cluster)."""
        from airflow_tfk.backends import get_backend
        from airflow_tfk.lifecycle import resolve_spec

        identity = identity_from_context(context)
        spec = resolve_spec(self.cluster_spec, identity, self.name_prefix)
        backend = get_backend(
            self.backend, **backend_config(self.backend, self.backend_config, self.kubernetes_conn_id)
        )
        return identity, spec, backend

    def _handle_of(self, context: Context) -> ClusterHandle:
        from airflow_tfk.handle import ClusterHandle

        _, spec, backend = self._resolve(context)
        return ClusterHandle.for_spec(spec, backend)

    def _finish(self, handle: ClusterHandle, outcome: str, message: str, failed_task: Any) -> dict[str, Any]:
        from airflow_tfk.errors import TrainingFailed
        from airflow_tfk.lifecycle import cleanup_after_success, delete_cluster

        if outcome != "succeeded":
            self._teardown(handle, message)
            if outcome == "timeout":
                from airflow.sdk.exceptions import AirflowTaskTimeout

                raise AirflowTaskTimeout(f"cluster {handle.ref.name}: {message}")
            if failed_task is not None:
                raise TrainingFailed(failed_task.name, failed_task.reason or "Error", message)
            raise TrainingFailed(handle.ref.name, outcome, message)
        self.log.info("training succeeded: %s", message)
        try:
            cleanup_after_success(handle, self.log.info)
            if self.cleanup == "all":
                delete_cluster(handle, self.log.info)
        except BaseException:
            self._teardown(handle, "clean-up after success was interrupted")
            raise
        self._handle = None
        return {**handle.to_dict(), "outcome": "succeeded"}

    def _teardown(self, handle: ClusterHandle, why: str) -> None:
        from airflow_tfk.lifecycle import teardown_after_failure

        self.log.warning("deleting cluster %s: %s", handle.ref.name, why)
        try:
            teardown_after_failure(handle, None, self.log.info)
        except Exception:
            self.log.exception(
                "could not delete cluster %s; delete it by label %s",
                handle.ref.name,
                handle.ref.label_selector,
            )
        self._handle = None

    def on_kill(self) -> None:
        """Mark-failed, ``dagrun_timeout`` and ``execution_timeout`` land here."""
        if self._handle is not None:
            self._teardown(self._handle, "the task was killed")


def _previous_run_policy(value: str) -> Any:
    from airflow_tfk.run_policy import PreviousRunPolicy

    try:
        return PreviousRunPolicy(value)
    except ValueError:
        raise ValueError(
            f"previous_run_policy: must be one of "
            f"{', '.join(p.value for p in PreviousRunPolicy)} (got {value!r})"
        ) from None
