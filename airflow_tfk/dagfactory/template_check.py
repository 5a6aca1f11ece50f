"""``airflow-tfk validate``'s render of a training file's cluster.

The DAG file never renders a template (parse time stays light), so a template directory
that reads outside itself or spends without bound, or a pod the platform policy refuses
once rendered, would otherwise be found only on the worker. ``validate`` renders the
cluster once, with the Params' defaults, through the same loader and bounds as the worker
(:mod:`airflow_tfk.render.templating`): a render error names ``cluster.template_dir``, the
template and the rule; each policy violation of the final pods names its field and rule
(:func:`~airflow_tfk.spec.platform_policy.check_manifests`), as the backend would before
creating anything.
"""

from __future__ import annotations

from pathlib import Path

from airflow_tfk.dagfactory.loader import TrainingFileError
from airflow_tfk.dagfactory.training import TrainingFile

FIELD = "cluster.template_dir"
#: the name a training file without one gets on the worker is the task's; any valid name does
_PROBE_NAME = "validate"


def check_template_dir(path: Path, training: TrainingFile) -> TrainingFileError | None:
    """The file's error (its others in ``more``) when its cluster does not render or its
    rendered pods break the platform policy; None when it passes or is left to run time (a
    templated directory or a spec only the worker can build)."""
    from airflow_tfk._airflow.platform_config import platform_policy
    from airflow_tfk.core.errors import SpecError
    from airflow_tfk.dagfactory.params import with_param_defaults
    from airflow_tfk.render.checked import render_checked
    from airflow_tfk.render.templating import RenderError
    from airflow_tfk.spec.cluster import TFClusterSpec

    cluster = training.cluster
    if not isinstance(cluster, dict):
        return None
    template_dir = cluster.get("template_dir")
    if isinstance(template_dir, str) and "{" in template_dir:
        return None
    values = with_param_defaults(cluster, training.params)
    try:
        spec = TFClusterSpec.from_dict({"name": _PROBE_NAME, **values})
    except SpecError:
        return None  # values only the worker renders: the worker checks them
    try:
        _, violations = render_checked(spec, platform_policy())
    except (RenderError, SpecError) as exc:
        return TrainingFileError(path, FIELD, f"does not render: {exc}"[:1000])
    found = [
        TrainingFileError(path, f"cluster.{v.field}", f"{v.message} [platform policy: {v.rule}]")
        for v in violations
    ]
    if not found:
        return None
    found[0].more = found[1:]
    return found[0]
