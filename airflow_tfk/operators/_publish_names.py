"""A training task refuses to start when a publish task right after it is for another
model than the one its args export: known before the cluster exists, where the publish
would otherwise fail (or publish an older version under its own name) only after the
whole training."""

from __future__ import annotations

from typing import Any

from airflow_tfk.core.errors import SpecError


def check_downstream_publish(task: Any, spec: Any) -> None:
    """Raise :class:`SpecError` naming the publish task's ``model_name`` and the spec's
    flag when they disagree; a templated name on either side is not known yet."""
    from airflow_tfk.operators.serving import TFPublishModelOperator
    from airflow_tfk.spec.export_name import publish_name_mismatch, spec_view

    if not task.has_dag():  # a task run on its own (tests, tools) has no downstream tasks
        return
    view = spec_view(spec)
    for downstream in task.downstream_list:
        if not isinstance(downstream, TFPublishModelOperator):
            continue
        why = publish_name_mismatch(view, downstream.model_name, prefix="cluster_spec.")
        if why is not None:
            raise SpecError(f"model_name of task {downstream.task_id!r}", why)
