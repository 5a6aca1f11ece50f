"""Operators for one lifecycle step each: create, clean up the PS, delete.

For the whole lifecycle in one task see :class:`airflow_tfk.operators.training.TFTrainingOperator`.
The cluster reference travels between tasks as the XCom of the create task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_tfk._airflow.templated_fields import CheckedTemplateFields
from airflow_tfk.core.constants import NAME_PREFIX
from airflow_tfk.operators._context import identity_from_context
from airflow_tfk.operators._on_backend import OnBackendOperator
from airflow_tfk.spec import operator_options as args

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tfk.spec.cluster import TFClusterSpec


class TFCreateClusterOperator(OnBackendOperator):
    """Create a distributed TensorFlow cluster, or reattach to this task's existing one.

    :param cluster_spec: the cluster: a ``TFClusterSpec``, a mapping of its fields, or YAML
        text. Without ``name``, the name is derived from dag, task, run and map index, so a
        retry reattaches instead of creating a second cluster. (templated)
    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options, e.g. ``{"root": ...}`` for local. (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :return: (XCom) the cluster handle: name, namespace, label_selector, backend, mode.
    """

    template_fields: Sequence[str] = ("cluster_spec", "backend_config")
    ui_color = "#ff8f00"

    def __init__(
        self,
        *,
        cluster_spec: TFClusterSpec | Mapping[str, Any] | str,
        name_prefix: str = NAME_PREFIX,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        args.cluster_spec_arg(cluster_spec)
        args.name_prefix_arg(name_prefix)
        self.cluster_spec = cluster_spec
        self.name_prefix = name_prefix

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_tfk.run.handle import ClusterHandle
        from airflow_tfk.run.lifecycle import create_or_reattach, resolve_spec

        identity = identity_from_context(context)
        options = self.backend_options()
        spec = resolve_spec(self.cluster_spec, identity, self.name_prefix)
        backend = self.make_backend(**options)
        create_or_reattach(backend, spec, identity, self.log.info)
        return ClusterHandle.for_spec(spec, backend, identity).to_dict()


class TFDeleteParameterServersOperator(CheckedTemplateFields, BaseOperator):
    """After the grace period, copy the PS logs into this task's log and delete the PS
    (and, in ``parameter_server`` mode, the workers): they never exit by themselves.

    Runs whatever the training's outcome (``trigger_rule='all_done'``).

    :param cluster: the create task's XCom. (templated)
    :param grace_seconds: overrides the spec's ``ps_grace_seconds``.
    """

    template_fields: Sequence[str] = ("cluster",)

    def __init__(self, *, cluster: Any, grace_seconds: float | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        args.cluster_arg(cluster)
        args.number_arg(grace_seconds, "grace_seconds", lo=0, hi=86400, optional=True)
        self.cluster = cluster
        self.grace_seconds = grace_seconds

    def execute(self, context: Context) -> list[str]:
        from airflow_tfk.run.ending import Remove, RunResult, end_run
        from airflow_tfk.run.handle import ClusterHandle

        args.cluster_arg(self.cluster)
        handle = ClusterHandle.from_dict(self.cluster)
        ended = end_run(
            handle,
            f"the training is over; {self.task_id} ends the roles that never exit",
            result=RunResult.ACCEPTED,
            remove=Remove.LEFTOVERS,
            emit=self.log.info,
            grace_seconds=self.grace_seconds,
        )
        return list(ended.removed)


class TFDeleteClusterOperator(CheckedTemplateFields, BaseOperator):
    """Delete every object of a cluster (everything with its label). Idempotent; use it as
    a teardown task: ``delete.as_teardown(setups=create)``. What a training that did not
    succeed exported is set aside, so it is never published.

    :param cluster: the create task's XCom. (templated)
    :param capture_logs: copy the logs of failed tasks into this task's log first.
    """

    template_fields: Sequence[str] = ("cluster",)

    def __init__(self, *, cluster: Any, capture_logs: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        args.mapping_arg(cluster, "cluster")  # None: the create task made nothing
        args.bool_arg(capture_logs, "capture_logs")
        self.cluster = cluster
        self.capture_logs = capture_logs

    def execute(self, context: Context) -> None:
        from airflow_tfk.run.ending import RunResult, end_run
        from airflow_tfk.run.handle import ClusterHandle
        from airflow_tfk.run.policies import Outcome, evaluate

        if not self.cluster:
            self.log.info("no cluster was created; nothing to delete")
            return
        args.cluster_arg(self.cluster)
        handle = ClusterHandle.from_dict(self.cluster)
        status = handle.backend().status(handle.ref)
        # A training that succeeded keeps what it exported (a downstream task may publish
        # it); one that failed or is cut short here is a rejected run.
        verdict = evaluate(handle.mode, handle.replicas, status, handle.max_lost_workers)
        succeeded = status.exists and verdict.outcome is Outcome.SUCCEEDED
        ended = end_run(
            handle,
            f"deleted by its teardown task {self.task_id}",
            result=RunResult.ACCEPTED if succeeded else RunResult.REJECTED,
            emit=self.log.info,
            status=status,
            grace_seconds=0,
            log_lines=None if self.capture_logs else 0,
        )
        if ended.gone:
            self.log.info("cluster %s is already gone; nothing to delete", handle.ref.name)
