"""The training file format: one YAML file = one training = one DAG.

```yaml
dag_id: digits_nightly            # default: the file name without .yaml
description: Nightly digits classifier
schedule: "0 3 * * *"             # cron, a preset (@daily, @hourly, @once...), or null: manual only
start_date: 2026-01-01
previous_run_policy: kill_previous  # allow | kill_previous | skip | wait
max_duration_minutes: 60          # execution_timeout + the cluster's max_duration_seconds
retries: 1
owners: [ml-platform]
tags: [digits]
backend: kubernetes               # kubernetes | local (default: $TFK_BACKEND)
kubernetes_conn_id: kubernetes_default
params:                           # the "Trigger DAG" form; refer to them as {{ params.NAME }}
  steps: {default: 600, type: integer, minimum: 1, title: Training steps}
cluster:                          # a TFClusterSpec (airflow-tfk render's format); name optional
  image: airflow-tfk/training:2.21.0
  mode: parameter_server
  command: [python, -m, airflow_tfk.runtime.examples.digits_app]
  args: [--tfk_steps, "{{ params.steps }}"]
  chief: {replicas: 1}
  ps: {replicas: 1}
  worker: {replicas: 2}
tensorboard: true                 # or the TFStartTensorBoardOperator's options
publish: {model_name: digits}     # the TFPublishModelOperator's options
sweep:                            # optional: a hyperparameter sweep instead of one training
  n_trials: 12                    # (TFHyperparameterSweepOperator's settings; task "sweep" replaces "train")
  search_space: {tfk_learning_rate: {type: float, low: 0.0001, high: 0.3, log: true}}
```

The file's own keys are declared once in :mod:`airflow_tfk.dagfactory.training_keys`
(type, default, bounds, help), which checks them and gives the JSON Schema their entries.
This module runs those checks and delegates each block to the class that owns it: the
``cluster`` block is validated by :class:`TFClusterSpec` itself (so fields other engineers
add to the spec work here unchanged), and ``publish``/``tensorboard`` accept exactly the
keyword arguments of their operators' ``__init__`` (read from the signature, so an option
added to an operator, such as a publish quality gate, passes straight through). Nothing is
built here; Airflow-side checks (Params, the schedule) happen in
:mod:`airflow_tfk.dagfactory.builder`, and ``airflow-tfk validate`` runs both.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk import dag_env
from airflow_tfk.core.constants import (
    BACKEND,
    KUBERNETES_CONN_ID,
    PROGRESS_INTERVAL_SECONDS,
)
from airflow_tfk.core.errors import SpecError, SpecErrors, unknown_key
from airflow_tfk.dagfactory import training_keys
from airflow_tfk.dagfactory.blocks import backend_config as _backend_config
from airflow_tfk.dagfactory.blocks import operator_blocks as _operator_blocks
from airflow_tfk.dagfactory.params import param_refs, with_param_defaults
from airflow_tfk.dagfactory.params import parse_params as _params
from airflow_tfk.dagfactory.training_keys import DEFAULT_START, KEYS
from airflow_tfk.spec.decl import Errors
from airflow_tfk.spec.run_policy import PreviousRunPolicy

#: the task ids of the generated DAG
TRAIN_TASK, PUBLISH_TASK, TENSORBOARD_TASK, SWEEP_TASK = "train", "publish", "tensorboard", "sweep"


@dataclass(frozen=True)
class TrainingFile:
    """A validated training file, as plain data (no Airflow objects).

    :param dag_id: the DAG's id.
    :param source: the file it came from (shown in the DAG's docs and in errors).
    :param cluster: the cluster spec's fields as written (templates kept; ``name``
        optional: derived from the task instance, so a retry reattaches).
    :param schedule: a cron expression, a preset, assets (see
        :mod:`~airflow_tfk.dagfactory.asset_schedule`) or ``None`` (manual only).
    :param params: name -> ``{"default": ..., <JSON schema keywords>}``.
    :param publish: the TFPublishModelOperator's keyword arguments, or ``None``.
    :param tensorboard: the TFStartTensorBoardOperator's keyword arguments, or ``None``.
    :param sweep: a :class:`~airflow_tfk.sweep.config.SweepConfig` mapping: the DAG runs a
        sweep of the cluster (task ``sweep``) instead of one training; ``max_duration_minutes``
        then bounds each trial, not the task.
    """

    dag_id: str
    source: str
    cluster: dict[str, Any]
    description: str | None = None
    schedule: str | dict[str, Any] | None = None
    start_date: dt.datetime = DEFAULT_START
    catchup: bool = False
    max_active_runs: int = 1
    previous_run_policy: str = PreviousRunPolicy.ALLOW.value
    max_duration_minutes: int | None = None
    retries: int = 0
    retry_delay_seconds: int = 300
    owners: tuple[str, ...] = ("airflow",)
    tags: tuple[str, ...] = ()
    backend: str = BACKEND
    kubernetes_conn_id: str = KUBERNETES_CONN_ID
    backend_config: dict[str, Any] | None = None
    deferrable: bool | None = None  # None: Airflow's [operators] default_deferrable
    progress_interval: float = PROGRESS_INTERVAL_SECONDS
    stall_seconds: float | None = None  # None: follows progress_interval (default_stall_seconds)
    cleanup: str = "ps"
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    publish: dict[str, Any] | None = None
    tensorboard: dict[str, Any] | None = None
    sweep: dict[str, Any] | None = None

    @property
    def dagrun_timeout_minutes(self) -> int | None:
        # The training's own limit plus room for TensorBoard and publishing around it; a
        # sweep runs many trainings, each bounded by its cluster's deadline.
        if self.max_duration_minutes is None or self.sweep is not None:
            return None
        return self.max_duration_minutes + 10


def _mapping(data: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SpecError(key, "must be a mapping", value)
    return dict(value)


# -- the blocks -----------------------------------------------------------------------------


#: the training file's own keys, from their declarations
TOP_LEVEL = tuple(key.name for key in KEYS)

#: the blocks that reach the operators' templated fields: rendered on the worker
TEMPLATED = ("cluster", "backend_config", "publish", "tensorboard", "sweep")


def parse_training(
    data: Mapping[str, Any],
    *,
    default_dag_id: str,
    source: str,
    root: str | None = None,
    specs_checked: bool = False,
) -> TrainingFile:
    """Validate a training file's mapping. Raises :class:`SpecError` naming the field
    (``cluster.worker.replicas``, ``publish.serving.replicas``, ``params.steps.minimun``...).

    :param root: the trainings folder the file was found in: its ``template_dir`` must stay
        inside it (default: the file's own folder).
    :param specs_checked: this very file passed the checks of its templates and of the
        cluster, sweep and publish specs in this context before (a stamp,
        :mod:`airflow_tfk.dagfactory.checked`): they are not run again; the keys and Params
        still are."""
    from airflow_tfk.dagfactory.sandbox import check_templates

    keys = training_keys.KEYS
    allowed = [key.name for key in keys]
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise SpecError(unknown[0], unknown_key(unknown[0], allowed))
    if not specs_checked:
        for block in TEMPLATED:
            check_templates(data.get(block), block)
    dag_id = next(key for key in keys if key.name == "dag_id").parse(data, default_dag_id)
    # Every independent error of the file at once: each key is checked on its own, and a
    # block that depends on another (publish on cluster) is checked only when that one is valid.
    errors = Errors()
    take = errors.take
    # Defaults read from the deployment's environment when the DAG file is parsed.
    env = {"backend": dag_env.BACKEND, "kubernetes_conn_id": dag_env.KUBERNETES_CONN_ID}
    checked = {
        key.name: take(functools.partial(key.parse, data, env.get(key.name)), env.get(key.name, key.default))
        for key in keys
        if key.kind != "block" and key.name != "dag_id"
    }
    if (
        data.get("max_active_runs") is None
        and checked["previous_run_policy"] != PreviousRunPolicy.ALLOW.value
    ):
        checked["max_active_runs"] = 2  # room for the run that waits on, skips or kills the previous one
    params = take(lambda: _params(data.get("params")), {})
    cluster = take(
        lambda: _required_cluster(data, params, checked["max_duration_minutes"], dag_id, specs_checked), None
    )
    if cluster is not None:
        take(lambda: _file_relative_template_dir(cluster, source, root))
    blocks = take(lambda: _operator_blocks(data, params, cluster)) if cluster is not None else None
    checked["publish"], checked["tensorboard"] = blocks or (None, None)
    checked["backend_config"] = take(lambda: _backend_config(data, checked["backend"]))
    checked["sweep"] = take(lambda: _sweep(data.get("sweep"), params, specs_checked))
    if cluster is not None and checked["sweep"] is not None and not specs_checked:
        take(lambda: _sweep_trials(cluster, checked["sweep"], params))
    if checked["publish"] is not None and not specs_checked:
        take(lambda: _publish_name(cluster, checked["publish"]))
    errors.raise_if_any()
    # A declared key the DAG does not read is checked but not kept.
    kept = {f.name for f in dataclasses.fields(TrainingFile)}
    return TrainingFile(
        dag_id=dag_id,
        source=source,
        cluster=cluster,
        params=params,
        **{name: value for name, value in checked.items() if name in kept},
    )


def _required_cluster(
    data: Mapping[str, Any],
    params: Mapping[str, Mapping[str, Any]],
    max_minutes: int | None,
    dag_id: str,
    specs_checked: bool,
) -> dict[str, Any]:
    cluster = _mapping(data, "cluster")
    if cluster is None:
        raise SpecError("cluster", "is required: the TFClusterSpec of the training")
    return _cluster(cluster, params, max_minutes, dag_id, specs_checked)


def _file_relative_template_dir(cluster: dict[str, Any], source: str, root: str | None) -> None:
    """A training file names its template overrides beside itself: a relative
    ``template_dir`` is taken from the file's folder, whatever the worker's directory.

    The renderer confines templates to their directory (render/template_loader.py); this
    confines the directory to the repository: whoever can merge a training file is not
    trusted with the worker's files, and ``template_dir: /`` with ``include 'etc/passwd'``
    would read them. So the folder must resolve, symbolic links followed, inside the
    trainings folder; an absolute path or a templated one (a Param could make it ``/``) is
    refused. Operators written in Python keep any directory: their author runs code anyway."""
    value = cluster.get("template_dir")
    if value is None:
        return
    field = "cluster.template_dir"
    if not isinstance(value, str) or not value:
        raise SpecError(field, "must be a folder path relative to the training file", value)
    if "{" in value:
        raise SpecError(field, "cannot be templated in a training file: write the folder's path", value)
    if os.path.isabs(value):
        raise SpecError(field, "must be relative to the training file (inside the trainings folder)", value)
    base = os.path.dirname(os.path.abspath(source))
    limit = os.path.realpath(root if root is not None else base)
    folder = os.path.realpath(os.path.join(base, value))
    if folder != limit and not folder.startswith(limit + os.sep):
        raise SpecError(field, f"must stay inside {limit} (symbolic links followed), not {folder}", value)
    cluster["template_dir"] = os.path.join(base, value)


def _sweep(
    value: object, params: Mapping[str, Mapping[str, Any]], specs_checked: bool
) -> dict[str, Any] | None:
    """The sweep block, checked by SweepConfig itself (its errors name ``sweep.<field>``)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SpecError("sweep", "must be a mapping of the sweep's settings", value)
    if not specs_checked:
        from airflow_tfk.sweep.config import SweepConfig

        SweepConfig.from_dict(with_param_defaults(dict(value), params))
    return dict(value)


def _sweep_trials(
    cluster: Mapping[str, Any], sweep: Mapping[str, Any], params: Mapping[str, Mapping[str, Any]]
) -> None:
    """The trials' specs as they will be when each trial starts (its flags appended),
    checked now: errors name ``cluster.<field>``."""
    from airflow_tfk.spec.cluster import TFClusterSpec
    from airflow_tfk.sweep.config import SweepConfig
    from airflow_tfk.sweep.trials import TRIAL_SUFFIX_ROOM, check_trials_fit

    probe = with_param_defaults(dict(cluster), params)
    # without a name, the trials' base is the task instance's, of at most this length
    base = None if probe.get("name") else "x" * (30 - TRIAL_SUFFIX_ROOM)
    try:
        spec = TFClusterSpec.from_dict({**probe, "name": probe.get("name") or base})
        check_trials_fit(spec, SweepConfig.from_dict(with_param_defaults(dict(sweep), params)), base)
    except SpecError as exc:
        raise SpecError(f"cluster.{exc.field}", exc.rule, exc.value) from None


def _publish_name(
    cluster: Mapping[str, Any],
    publish: Mapping[str, Any],
) -> None:
    """Refuse a publish of another model than the one the training's args export.

    Both are known before the run only when both are written out (no template): then the
    mismatch is certain, and refusing the file costs nothing, where the run would train in
    full and then find no version of the publish's name, or publish an older one a
    previous run left in the store under that name."""
    from airflow_tfk.spec.export_name import publish_name_mismatch

    why = publish_name_mismatch(cluster, publish.get("model_name"), prefix="cluster.")
    if why is not None:
        raise SpecError("publish.model_name", why)


def _cluster(
    cluster: dict[str, Any],
    params: Mapping[str, Mapping[str, Any]],
    max_minutes: int | None,
    dag_id: str,
    specs_checked: bool,
) -> dict[str, Any]:
    """The cluster block, checked by TFClusterSpec itself (errors prefixed ``cluster.``)."""

    for where, name in param_refs(cluster, "cluster"):
        if name not in params:
            raise SpecError(where, f"refers to params.{name}, which is not declared under params")
    if max_minutes is not None:
        limit = max_minutes * 60
        given = cluster.get("max_duration_seconds")
        if given is None:
            cluster["max_duration_seconds"] = limit
        elif isinstance(given, int) and not isinstance(given, bool) and given > limit:
            raise SpecError(
                "cluster.max_duration_seconds",
                f"must not exceed max_duration_minutes ({max_minutes} min = {limit} s)",
                given,
            )
    cluster.setdefault("namespace", dag_env.NAMESPACE)
    if specs_checked:
        return cluster
    from airflow_tfk.core.naming import cluster_name_for
    from airflow_tfk.spec.cluster import TFClusterSpec

    probe = with_param_defaults(cluster, params)
    if not probe.get("name"):
        # The name the train task will derive (same length for every run), so the
        # generated-name length checks are the real ones.
        probe["name"] = cluster_name_for(dag_id, TRAIN_TASK, "scheduled__2026-01-01T00:00:00+00:00")
    try:
        spec = TFClusterSpec.from_dict(probe)
        # The platform policy on what the file adds to the pods (no template is rendered
        # here; validate and the backend check the rendered pods).
        from airflow_tfk._airflow.platform_config import platform_policy
        from airflow_tfk.spec.platform_policy import raise_for
        from airflow_tfk.spec.spec_policy import check_spec

        raise_for(check_spec(spec, platform_policy()))
    except SpecError as exc:
        moved = [SpecError(f"cluster.{e.field}", e.rule, e.value) for e in getattr(exc, "errors", [exc])]
        raise (moved[0] if len(moved) == 1 else SpecErrors(moved)) from None
    return cluster
