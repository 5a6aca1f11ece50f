"""The one function that turns a validated :class:`TrainingFile` into an Airflow DAG.

The wiring is the one of ``dags/tfk_train_publish.py`` and ``dags/tfk_scheduled_training.py``:
``tensorboard`` (optional, alongside) | ``train`` (create -> wait -> clean up, with the
previous-run policy and the maximum duration) >> ``publish`` (optional). Everything Airflow
would reject when bagging the DAG (Param defaults, the cron expression) is checked here
too, so the error is raised while the training file is known and names its field.
No template is rendered and nothing talks to a cluster: the operators' own parse-time
checks run, nothing more.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.errors import SpecError, unknown_key
from airflow_tfk.dagfactory.training import (
    PUBLISH_TASK,
    SWEEP_TASK,
    TENSORBOARD_TASK,
    TRAIN_TASK,
    TrainingFile,
)
from airflow_tfk.dagfactory.training_keys import PRESETS
from airflow_tfk.spec.operator_options import holds_jinja

if TYPE_CHECKING:
    from airflow.sdk import DAG, BaseOperator, Param

# Operator parameters of TFPublishModelOperator / TFStartTensorBoardOperator that are fields of the
# spec they build; any other spec field comes from the nested ``serving``/``tensorboard``.
_DIRECT_SPEC_FIELDS = frozenset({"model_name", "claim", "sub_path", "base_path", "name"})
# TrainingFile fields that go unchanged to the parameter of the same name: of the DAG, of
# every operator, of the training operator.
#: What a schedule may be, said after croniter's own words, which name neither the fields
#: nor the presets that most schedules are.
CRON_HINT = (
    "write 5 fields (minute hour day-of-month month day-of-week, e.g. '0 3 * * *'), or a preset: "
    + ", ".join(PRESETS)
)
_DAG_FIELDS = ("dag_id", "description", "schedule", "start_date", "catchup", "max_active_runs")
_OPERATOR_FIELDS = ("backend", "backend_config", "kubernetes_conn_id")
_TRAIN_FIELDS = ("deferrable", "cleanup", "progress_interval", "stall_seconds", "previous_run_policy")


def _passed_on(training: TrainingFile, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(training, name) for name in names}


def build_params(training: TrainingFile) -> dict[str, Param]:
    """The trigger form's Params (their defaults are checked by :func:`check_params`)."""
    from airflow.sdk import Param

    out: dict[str, Param] = {}
    for name, definition in training.params.items():
        schema = {k: v for k, v in definition.items() if k != "default"}
        has_default = "default" in definition
        if not has_default and training.schedule is not None:
            raise SpecError(
                f"params.{name}.default", "is required: a scheduled run has nobody to fill in the form"
            )
        out[name] = Param(definition["default"], **schema) if has_default else Param(**schema)
    return out


def check_params(params: dict[str, Param]) -> None:
    """Each default against its own schema, naming the Param. (Airflow checks them itself
    only for scheduled DAGs, with a message that does not say which Param.)"""
    for name, param in params.items():
        if not param.has_value:
            continue
        try:
            param.resolve(suppress_exception=False)
        except Exception as exc:  # jsonschema's SchemaError or Airflow's ParamValidationError
            detail = str(exc).strip().splitlines()[0]
            raise SpecError(f"params.{name}", f"invalid default or schema: {detail}") from None


def _check_spec(block: str, nested: str, options: dict[str, Any], make_spec: Any) -> None:
    """Run an operator's own spec validation now, naming the field as written in the file."""
    if holds_jinja({k: v for k, v in options.items() if k in _DIRECT_SPEC_FIELDS or k == nested}):
        return  # checked by the operator after rendering, before anything is created
    try:
        make_spec()
    except SpecError as exc:
        head = exc.field.split(".")[0].split("[")[0]
        where = f"{block}.{exc.field}" if head in _DIRECT_SPEC_FIELDS else f"{block}.{nested}.{exc.field}"
        raise SpecError(where, exc.rule, exc.value) from None


def _in_block(block: str, make: Any) -> Any:
    """``make()``, with an operator's own argument errors named as the file writes them
    (``version`` of the publish block is ``publish.version``)."""
    try:
        return make()
    except SpecError as exc:
        if exc.field == block or exc.field.startswith((f"{block}.", f"{block}[")):
            raise
        raise SpecError(f"{block}.{exc.field}", exc.rule, exc.value) from None


def _check_keys(where: str, options: Any, spec_class: type) -> None:
    """Unknown keys of a nested spec, even where templated values leave the rest to run time."""
    import dataclasses

    if not isinstance(options, dict):
        return
    allowed = {f.name for f in dataclasses.fields(spec_class)} - _DIRECT_SPEC_FIELDS
    unknown = sorted(str(k) for k in set(options) - allowed)
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", unknown_key(unknown[0], sorted(allowed)))


def _check_gate(options: dict[str, Any], publish: Any) -> None:
    """The publish step's quality gate, by its own validation (its fields are named
    ``quality_gate.*`` already); left to run time when templated or not supported."""
    gate = getattr(publish, "gate", None)
    if not callable(gate) or holds_jinja(options.get("quality_gate")):
        return
    try:
        gate()
    except SpecError as exc:
        raise SpecError(f"publish.{exc.field}", exc.rule, exc.value) from None


def _check_version(options: dict[str, Any], publish: Any) -> None:
    if holds_jinja(options.get("version")):
        return
    try:
        publish._version()
    except SpecError as exc:
        raise SpecError(f"publish.{exc.field}", exc.rule, exc.value) from None


def _check_operator_blocks(t: TrainingFile, common: dict[str, Any]) -> None:
    """``publish`` and ``tensorboard``, checked by their operators on probes built with
    the Params' defaults in place of ``{{ params.NAME }}`` (the DAG's own operators keep the
    templates, rendered on the worker)."""
    from airflow_tfk.dagfactory.params import with_param_defaults
    from airflow_tfk.operators.serving import TFPublishModelOperator
    from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator
    from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec

    if t.publish is not None:
        options = with_param_defaults(t.publish, t.params)
        _check_keys("publish.serving", options.get("serving"), ServingSpec)
        publish = _in_block(
            "publish", lambda: TFPublishModelOperator(task_id=PUBLISH_TASK, **common, **options)
        )
        _check_spec("publish", "serving", options, publish.spec)
        _check_gate(options, publish)
        _check_version(options, publish)
    if t.tensorboard is not None:
        options = with_param_defaults(t.tensorboard, t.params)
        _check_keys("tensorboard.tensorboard", options.get("tensorboard"), TensorBoardSpec)
        tensorboard = _in_block(
            "tensorboard", lambda: TFStartTensorBoardOperator(task_id=TENSORBOARD_TASK, **common, **options)
        )
        _check_spec("tensorboard", "tensorboard", options, lambda: tensorboard.spec(t.dag_id))


def _doc(training: TrainingFile, text: str) -> str:
    parts = [training.description or f"Training `{training.dag_id}`."]
    parts.append(f"Generated by airflow-tfk from the training file `{training.source}`:")
    # A fence longer than any run of backticks in the file: the file's text cannot close it
    # and have the rest rendered as Markdown (links, images) in the DAG's docs.
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", text)), default=0))
    parts.append(f"{fence}yaml\n{text.rstrip()}\n{fence}" if text else "")
    return "\n\n".join(p for p in parts if p)


def _dag(t: TrainingFile, params: dict[str, Param], text: str, run_timeout: timedelta | None) -> DAG:
    from airflow_tfk.dagfactory.sandbox import SandboxedDAG

    fields = _passed_on(t, _DAG_FIELDS)
    if isinstance(t.schedule, dict):
        from airflow_tfk.dagfactory.asset_schedule import airflow_schedule

        fields["schedule"] = airflow_schedule(t.schedule)
    return SandboxedDAG(
        **fields,
        dagrun_timeout=run_timeout,
        tags=["airflow-tfk", "dag-as-code", *t.tags],
        params=params,
        default_args={
            "owner": ", ".join(t.owners),
            "retries": t.retries,
            "retry_delay": timedelta(seconds=t.retry_delay_seconds),
        },
        # "{{ params.workers }}" must reach the spec as an int, not the text "2"; the
        # environment is the sandbox's (SandboxedDAG), never Airflow's unsandboxed native one.
        render_template_as_native_obj=True,
        doc_md=_doc(t, text),
    )


def build_dag(training: TrainingFile, text: str = "", *, specs_checked: bool = False) -> DAG:
    """The DAG of one training file. Raises :class:`SpecError` naming the field.

    :param text: the file's YAML, shown in the DAG's docs (the UI's code view shows the
        loader's Python file, not the YAML).
    :param specs_checked: the file's publish and tensorboard blocks passed their operators'
        checks before (see :func:`~airflow_tfk.dagfactory.training.parse_training`).
    """
    from airflow.sdk.exceptions import AirflowException

    from airflow_tfk.operators.serving import TFPublishModelOperator
    from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator
    from airflow_tfk.operators.training import TFTrainingOperator

    t = training
    max_duration = timedelta(minutes=t.max_duration_minutes) if t.max_duration_minutes else None
    run_timeout = timedelta(minutes=t.dagrun_timeout_minutes) if t.dagrun_timeout_minutes else None
    params = build_params(t)
    if t.schedule is None:
        check_params(params)  # a scheduled DAG's are checked by DAG() below
    try:
        dag = _dag(t, params, text, run_timeout)
    except Exception:
        check_params(params)  # the Param at fault, by name, if that was the reason
        raise
    common = _passed_on(t, _OPERATOR_FIELDS)
    if not specs_checked:
        _check_operator_blocks(t, common)
    with dag:
        if t.tensorboard is not None:
            TFStartTensorBoardOperator(task_id=TENSORBOARD_TASK, **common, **t.tensorboard)
        train: BaseOperator
        if t.sweep is not None:
            from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator

            train = TFHyperparameterSweepOperator(
                task_id=SWEEP_TASK, cluster_spec=t.cluster, sweep=t.sweep, **common
            )
        else:
            train = TFTrainingOperator(
                task_id=TRAIN_TASK,
                cluster_spec=t.cluster,
                execution_timeout=max_duration,
                tensorboard_task_id=TENSORBOARD_TASK,
                **common,
                **_passed_on(t, _TRAIN_FIELDS),
            )
        if t.publish is not None:
            train >> TFPublishModelOperator(task_id=PUBLISH_TASK, **common, **t.publish)
    try:
        dag.validate()  # what the DagBag would do; here the error still knows its file
    except AirflowException as exc:
        if "timetable" in type(exc).__name__.lower():
            raise SpecError("schedule", f"is not a valid cron expression: {exc}; {CRON_HINT}") from None
        raise SpecError("spec", str(exc)) from None
    return dag
