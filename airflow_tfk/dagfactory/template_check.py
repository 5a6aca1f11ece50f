"""``airflow-tfk validate``'s render of a training file's ``template_dir``.

The DAG file never renders a template (parse time stays light), so a template directory
that reads outside itself or spends without bound would otherwise be found only on the
worker. ``validate`` renders the cluster once, with the Params' defaults, through the same
loader and bounds as the worker (:mod:`airflow_tfk.render.templating`): the error names
``cluster.template_dir``, the template and the rule.
"""

from __future__ import annotations

from pathlib import Path

from airflow_tfk.dagfactory.loader import TrainingFileError
from airflow_tfk.dagfactory.training import TrainingFile

FIELD = "cluster.template_dir"
#: the name a training file without one gets on the worker is the task's; any valid name does
_PROBE_NAME = "validate"


def check_template_dir(path: Path, training: TrainingFile) -> TrainingFileError | None:
    """The file's error when its ``template_dir`` does not render; None when it renders, has
    none, or is left to run time (a templated directory or a spec only the worker can build)."""
    from airflow_tfk.core.errors import SpecError
    from airflow_tfk.dagfactory.params import with_param_defaults
    from airflow_tfk.render.manifests import render
    from airflow_tfk.render.templating import RenderError
    from airflow_tfk.spec.cluster import TFClusterSpec

    cluster = training.cluster
    template_dir = cluster.get("template_dir") if isinstance(cluster, dict) else None
    if not isinstance(template_dir, str) or "{" in template_dir:
        return None
    values = with_param_defaults(cluster, training.params)
    try:
        spec = TFClusterSpec.from_dict({"name": _PROBE_NAME, **values})
    except SpecError:
        return None  # values only the worker renders: the worker checks them
    try:
        render(spec)
    except (RenderError, SpecError) as exc:
        return TrainingFileError(path, FIELD, f"does not render: {exc}"[:1000])
    return None
