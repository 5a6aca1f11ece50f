"""`TFSweepOrphansOperator`: the Airflow side of :mod:`airflow_tfk.run.orphans`.

Schedule it (``dags/tfk_orphan_sweeper.py`` does, every 10 minutes): it asks Airflow, through
the task SDK, for the state of each cluster's owning task instance and deletes the
clusters whose owner is no longer running, or that are past their deadline.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators._on_backend import OnBackendOperator
from airflow_tfk.spec import operator_options as args

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tfk.core.naming import RunIdentity


class TFSweepOrphansOperator(OnBackendOperator):
    """Delete orphaned TF clusters.

    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options. (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :param namespace: where to look (None: every namespace the backend can list).
    :param report_only: only log what would be deleted (a dry run). (templated)
    :return: (XCom) the swept clusters: name, namespace, reason, deleted.
    """

    template_fields: Sequence[str] = ("backend", "backend_config", "namespace", "report_only")

    def __init__(
        self,
        *,
        namespace: str | None = None,
        report_only: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        args.namespace_arg(namespace)
        args.bool_arg(report_only, "report_only")
        self.namespace = namespace
        # Not "dry_run": BaseOperator has a dry_run() method.
        self.report_only = report_only

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from airflow_tfk.run.orphans import sweep

        options = self.backend_options()
        args.namespace_arg(self.namespace)  # as rendered
        if args.templated(self.namespace):
            raise SpecError("namespace", "must be a namespace name (DNS-1123 label)", self.namespace)
        backend = self.make_backend(**options)
        ti = context["ti"]

        def ti_state(identity: RunIdentity) -> str | None:
            return task_state(ti, identity)

        results = sweep(backend, self.namespace, ti_state, dry_run=bool(self.report_only), emit=self.log.info)
        return [
            {"name": r.ref.name, "namespace": r.ref.namespace, "reason": r.reason, "deleted": r.deleted}
            for r in results
        ]


def task_state(ti: Any, identity: RunIdentity) -> str | None:
    """The state of ``identity``'s task instance as Airflow reports it (None: unknown to
    Airflow - the DAG, the run or the task is gone)."""
    states = ti.get_task_states(
        dag_id=identity.dag_id,
        task_ids=[identity.task_id],
        run_ids=[identity.run_id],
        map_index=identity.map_index if identity.map_index >= 0 else None,
    )
    per_run = (states or {}).get(identity.run_id) or {}
    key = identity.task_id if identity.map_index < 0 else f"{identity.task_id}_{identity.map_index}"
    state = per_run.get(key)
    return None if state is None else str(getattr(state, "value", state))
