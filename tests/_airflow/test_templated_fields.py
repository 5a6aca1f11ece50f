"""airflow_tfk/_airflow/templated_fields.py: in a plain Python DAG, every template field of every
provider operator and of the sensor refuses a value with no text spelling printed inside a
text (``--lr={{ params.lr }}`` with a null Param), naming the field, the path in it and the
task, when Airflow renders the field: before ``execute``, so before anything exists. A
template of one ``{{ expression }}`` keeps its value, native rendering on or off.

Rendered as Airflow renders: the DAG's own environment (what the task runner passes),
``BaseOperator.render_template_fields``, a real ``RuntimeTaskInstance`` and its context.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import runpy
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jinja2
import pendulum
import pytest
from airflow.sdk import DAG, BaseOperator, Param
from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

import airflow_tfk.operators
import airflow_tfk.sensors
from airflow_tfk._airflow.templated_fields import CheckedTemplateFields, field_path
from airflow_tfk.core.errors import SpecError, TemplateFieldError, TemplateValueError
from airflow_tfk.operators.approval_flow import (
    TFPromoteCandidateOperator,
    TFStageCandidateOperator,
    TFWithdrawCandidateOperator,
)
from airflow_tfk.operators.cluster import (
    TFCreateClusterOperator,
    TFDeleteClusterOperator,
    TFDeleteParameterServersOperator,
)
from airflow_tfk.operators.serving import TFPublishModelOperator, TFStopModelServerOperator
from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator
from airflow_tfk.operators.sweeper import TFSweepOrphansOperator
from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator, TFStopTensorBoardOperator
from airflow_tfk.operators.training import TFTrainingOperator
from airflow_tfk.sensors.cluster import TFClusterSensor

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"image": "x", "mode": "all_reduce", "command": ["python", "t.py"], "worker": {"replicas": 1}}
HANDLE = {"name": "c", "namespace": "default", "backend": "local", "mode": "all_reduce"}
START = pendulum.datetime(2026, 1, 1, tz="UTC")

BUILD: dict[type, Callable[[], BaseOperator]] = {
    TFTrainingOperator: lambda: TFTrainingOperator(task_id="t", backend="local", cluster_spec=SPEC),
    TFCreateClusterOperator: lambda: TFCreateClusterOperator(task_id="t", backend="local", cluster_spec=SPEC),
    TFDeleteParameterServersOperator: lambda: TFDeleteParameterServersOperator(task_id="t", cluster=HANDLE),
    TFDeleteClusterOperator: lambda: TFDeleteClusterOperator(task_id="t", cluster=HANDLE),
    TFClusterSensor: lambda: TFClusterSensor(task_id="t", cluster=HANDLE),
    TFPublishModelOperator: lambda: TFPublishModelOperator(
        task_id="t", backend="local", model_name="m", base_path="/m"
    ),
    TFStageCandidateOperator: lambda: TFStageCandidateOperator(
        task_id="t", backend="local", model_name="m", base_path="/m"
    ),
    TFPromoteCandidateOperator: lambda: TFPromoteCandidateOperator(
        task_id="t",
        backend="local",
        model_name="m",
        base_path="/m",
        stage_task_id="stage",
        approve_task_id="approve",
    ),
    TFWithdrawCandidateOperator: lambda: TFWithdrawCandidateOperator(
        task_id="t",
        backend="local",
        model_name="m",
        base_path="/m",
        stage_task_id="stage",
        approve_task_id="approve",
        promote_task_id="promote",
    ),
    TFStopModelServerOperator: lambda: TFStopModelServerOperator(
        task_id="t", backend="local", model_name="m"
    ),
    TFHyperparameterSweepOperator: lambda: TFHyperparameterSweepOperator(
        task_id="t",
        backend="local",
        cluster_spec=SPEC,
        sweep="n_trials: 2\nsearch_space: {lr: {low: 0.1, high: 1}}",
    ),
    TFSweepOrphansOperator: lambda: TFSweepOrphansOperator(task_id="t", backend="local"),
    TFStartTensorBoardOperator: lambda: TFStartTensorBoardOperator(
        task_id="t", backend="local", claim="logs"
    ),
    TFStopTensorBoardOperator: lambda: TFStopTensorBoardOperator(task_id="t", backend="local", claim="logs"),
}
FIELDS = [(cls, field) for cls in BUILD for field in cls.template_fields]


def _operator_classes() -> set[type]:
    found = set()
    for package in (airflow_tfk.operators, airflow_tfk.sensors):
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if (
                    cls.__module__ == module.__name__
                    and issubclass(cls, BaseOperator)
                    and cls.template_fields
                ):
                    found.add(cls)
    return found


def test_every_operator_and_sensor_with_template_fields_checks_them() -> None:
    found = _operator_classes()
    assert found == set(BUILD), "a new operator joins BUILD (and is a CheckedTemplateFields)"
    assert all(issubclass(cls, CheckedTemplateFields) for cls in found)


def _in_dag(build: Callable[[], BaseOperator], native: bool, **dag_args: Any) -> tuple[DAG, Any]:
    with DAG(
        f"plain_{uuid.uuid4().hex[:8]}",
        schedule=None,
        start_date=START,
        render_template_as_native_obj=native,
        **dag_args,
    ) as dag:
        op = build()
    return dag, op


def _render(dag: DAG, op: Any, params: dict[str, Any]) -> None:
    # as the task runner does: the DAG's own environment, handed to the operator
    op.render_template_fields({"params": params, "dag": dag}, dag.get_template_env())


@pytest.mark.parametrize("native", [False, True], ids=["text", "native"])
@pytest.mark.parametrize(("cls", "field"), FIELDS, ids=[f"{c.__name__}.{f}" for c, f in FIELDS])
def test_every_template_field_refuses_a_null_inside_a_text_naming_it(
    cls: type, field: str, native: bool
) -> None:
    template = ["--ok={{ params.ok }}", {"k": "p/{{ params.bad }}"}]
    dag, op = _in_dag(BUILD[cls], native)
    setattr(op, field, template)
    with pytest.raises(TemplateFieldError) as err:
        _render(dag, op, {"ok": 0.1, "bad": None})
    assert isinstance(err.value, SpecError) and isinstance(err.value, TemplateValueError)
    assert err.value.field == f"{field}[1].k"
    assert "in task 't'" in str(err.value) and "'p/{{ params.bad }}'" in str(err.value)
    assert "null value (None)" in str(err.value)

    dag, op = _in_dag(BUILD[cls], native)
    setattr(op, field, template)
    _render(dag, op, {"ok": 0.1, "bad": "x"})
    assert getattr(op, field) == ["--ok=0.1", {"k": "p/x"}]


@pytest.mark.parametrize("native", [False, True], ids=["text", "native"])
@pytest.mark.parametrize(
    ("value", "kind"),
    [(True, "bool"), (False, "bool"), ([1, 2], "list"), ({"a": 1}, "dict"), (b"x", "bytes")],
)
def test_booleans_lists_mappings_inside_args_env_and_names_are_refused(
    value: Any, kind: str, native: bool
) -> None:
    spec = {
        **SPEC,
        "name": "run-{{ params.v | string | length }}",
        "args": ["--a", "b"],
        "env": {"FLAGS": "{{ params.v | string }}", "NESTED": ["x-{{ params.v }}"]},
    }
    dag, op = _in_dag(lambda: TFTrainingOperator(task_id="train", backend="local", cluster_spec=spec), native)
    with pytest.raises(TemplateFieldError, match=f"a {kind} value") as err:
        _render(dag, op, {"v": value})
    assert err.value.field == "cluster_spec.env.NESTED[0]"


@pytest.mark.parametrize("native", [False, True], ids=["text", "native"])
def test_one_expression_keeps_its_value_and_numbers_spell_in_a_text(native: bool) -> None:
    """A null ``version`` still means the newest; ``--lr={{ params.lr }}`` with 0.1 is
    ``--lr=0.1``; a list alone stays a list, even when the DAG renders text."""

    def build() -> Any:
        spec = {
            **SPEC,
            "args": ["--lr={{ params.lr }}", "--steps={{ params.steps }}"],
            "command": "{{ params.cmd }}",
        }
        train = TFTrainingOperator(task_id="train", backend="local", cluster_spec=spec)
        publish = TFPublishModelOperator(
            task_id="publish", backend="local", model_name="m", base_path="/m", version="{{ params.version }}"
        )
        return train, publish

    dag, (train, publish) = _in_dag(build, native)
    params = {"lr": 0.1, "steps": 0, "version": None, "cmd": ["python", "t.py"]}
    _render(dag, train, params)
    _render(dag, publish, params)
    assert train.cluster_spec["args"] == ["--lr=0.1", "--steps=0"]
    assert train.cluster_spec["command"] == ["python", "t.py"]
    assert publish.version is None


def test_the_dags_own_environment_is_kept(tmp_path: Path) -> None:
    """The DAG author's macros, filters, search path and undefined render as before."""
    (tmp_path / "flags.txt").write_text("--from-file")
    spec = {**SPEC, "args": ["{% include 'flags.txt' %}", "--lr={{ half(params.lr) }}", "{{ 'x' | shout }}"]}
    dag, op = _in_dag(
        lambda: TFTrainingOperator(task_id="train", backend="local", cluster_spec=spec),
        False,
        template_searchpath=[str(tmp_path)],
        user_defined_macros={"half": lambda v: v / 2},
        user_defined_filters={"shout": lambda v: v.upper()},
    )
    _render(dag, op, {"lr": 0.2})
    assert op.cluster_spec["args"] == ["--from-file", "--lr=0.1", "X"]
    # the DAG's StrictUndefined still fails a misspelt Param, as Airflow's own error
    dag, op = _in_dag(lambda: TFTrainingOperator(task_id="train", backend="local", cluster_spec=spec), True)
    op.cluster_spec = {**SPEC, "args": ["--lr={{ params.lrr }}"]}
    with pytest.raises(jinja2.UndefinedError):
        _render(dag, op, {"lr": 0.2})
    # a lenient undefined renders empty, as the DAG asked
    dag, op = _in_dag(
        lambda: TFTrainingOperator(task_id="train", backend="local", cluster_spec=spec),
        False,
        template_undefined=jinja2.Undefined,
    )
    op.cluster_spec = {**SPEC, "args": ["--lr={{ params.lrr }}"]}
    _render(dag, op, {"lr": 0.2})
    assert op.cluster_spec["args"] == ["--lr="]


def _runtime_ti(task: Any) -> RuntimeTaskInstance:
    return RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(),
        task_id=task.task_id,
        dag_id=task.dag_id,
        run_id="manual__1",
        try_number=1,
        map_index=-1,
        task=task,
        start_date=pendulum.now("UTC"),
        max_tries=0,
    )


@pytest.mark.parametrize("native", [False, True], ids=["text", "native"])
def test_the_task_runner_refuses_a_null_param_inside_args(native: bool) -> None:
    """The task runner's own steps (``_prepare``): the context a ``RuntimeTaskInstance``
    builds from the DAG's Params, rendered in ``dag.get_template_env()``."""
    params = {"lr": Param(None, type=["null", "number"]), "version": Param(None, type=["null", "integer"])}
    with DAG(
        "plain_lr", schedule=None, start_date=START, params=params, render_template_as_native_obj=native
    ) as dag:
        train = TFTrainingOperator(
            task_id="train", backend="local", cluster_spec={**SPEC, "args": ["--lr={{ params.lr }}"]}
        )
        publish = TFPublishModelOperator(
            task_id="publish", backend="local", model_name="m", base_path="/m", version="{{ params.version }}"
        )
    ti = _runtime_ti(train)
    with pytest.raises(TemplateFieldError) as err:
        ti.render_templates(context=ti.get_template_context(), jinja_env=dag.get_template_env())
    assert str(err.value).startswith(
        "cluster_spec.args[0]: in task 'train', the template '--lr={{ params.lr }}'"
    )

    ti = _runtime_ti(publish)
    ti.render_templates(context=ti.get_template_context(), jinja_env=dag.get_template_env())
    assert ti.task.version is None


def test_a_mapped_task_is_checked_too() -> None:
    """A mapped task renders through the unmapped operator's ``_do_render_template_fields``."""
    with DAG("mapped", schedule=None, start_date=START, params={"lr": None}) as dag:
        mapped = TFTrainingOperator.partial(
            task_id="train", backend="local", cluster_spec={**SPEC, "args": ["--lr={{ params.lr }}"]}
        ).expand(backend_config=[{"root": "/tmp/a"}, {"root": "/tmp/b"}])
    ti = SimpleNamespace(dag_id="mapped", task_id="train", run_id="r", map_index=1, try_number=1)
    context = {"dag": dag, "dag_run": SimpleNamespace(conf={}), "ti": ti, "task_instance": ti}
    with pytest.raises(TemplateFieldError) as err:
        mapped.render_template_fields(context, dag.get_template_env())
    assert err.value.field == "cluster_spec.args[0]"


def test_field_path_finds_the_template_where_it_was_written() -> None:
    value = {"a": ["x", {"b": "{{ t }}"}], "c": "{{ t }}"}
    assert field_path(value, "{{ t }}", "f") == "f.a[1].b"
    assert field_path(value, "missing", "f") == "f"
    assert field_path("{{ t }}", "{{ t }}", "f") == "f"


def test_parsing_a_plain_dag_builds_no_template_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse time stays small: constructing the operators of the example DAGs compiles no
    template and builds no Jinja environment (that happens when a task renders)."""
    import airflow.sdk.definitions._internal.templater as templater

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a Jinja environment was built at parse time")

    monkeypatch.setattr(templater, "create_template_env", refuse)
    monkeypatch.setattr(jinja2.Environment, "from_string", refuse)
    for name in ("tfk_quickstart.py", "tfk_train_publish.py", "tfk_orphan_sweeper.py"):
        runpy.run_path(str(ROOT / "dags" / name), run_name="dag_under_test")


def test_a_subclass_template_file_is_a_text(tmp_path: Path) -> None:
    """A subclass that names a ``template_ext`` has its files loaded by the DAG's search
    path and checked as texts."""

    class FromFile(TFTrainingOperator):
        template_ext = (".args",)

    (tmp_path / "lr.args").write_text("--lr={{ params.lr }}")
    spec = {**SPEC, "args": ["lr.args"]}
    build = lambda: FromFile(task_id="train", backend="local", cluster_spec=spec)  # noqa: E731
    dag, op = _in_dag(build, True, template_searchpath=[str(tmp_path)])
    _render(dag, op, {"lr": 0.1})
    assert op.cluster_spec["args"] == ["--lr=0.1"]
    dag, op = _in_dag(build, True, template_searchpath=[str(tmp_path)])
    with pytest.raises(TemplateFieldError) as err:
        _render(dag, op, {"lr": None})
    assert err.value.field == "cluster_spec.args[0]"


SPELT_INSIDE = [
    "{{ '--lr=' ~ params.v }}",
    "--x {{ 'a' ~ params.v ~ 'b' }}",
    "{{ '--lr=%s' % params.v }}",
    "{{ '--lr=%s %s' % (1, params.v) }}",
    "{{ '--lr=%(v)s' % {'v': params.v} }}",
    "{{ '--lr=%s' | format(params.v) }}",
    "{{ '--lr={}'.format(params.v) }}",
    "{{ '--lr={v}'.format(v=params.v) }}",
    "{{ [1, params.v] | join(',') }}",
    "{{ params.v | center(4) }}",
    "{{ params.v | trim }}",
    "{{ 'X' | replace('X', params.v) }}",
    "{% set v = '--lr=' ~ params.v %}{{ v }}",
    "{% set ns = namespace(v='') %}{% set ns.v = ns.v ~ params.v %}{{ ns.v }}",
    "{% filter format(params.v) %}%s{% endfilter %}",
]


@pytest.mark.parametrize("native", [False, True], ids=["text", "native"])
@pytest.mark.parametrize("value", [None, True, [1, 2], {"a": 1}], ids=["null", "bool", "list", "dict"])
@pytest.mark.parametrize("template", SPELT_INSIDE)
def test_a_value_an_expression_writes_into_a_text_is_checked_too(
    template: str, value: Any, native: bool
) -> None:
    """``{{ '--lr=' ~ params.lr }}`` makes the same ``--lr=None`` as ``--lr={{ params.lr }}``:
    concatenation, ``%`` and ``format``, ``join`` and the filters that spell their input
    are refused as printing is, whatever builds the text."""
    spec = {**SPEC, "args": [template]}
    dag, op = _in_dag(lambda: TFTrainingOperator(task_id="t", backend="local", cluster_spec=spec), native)
    with pytest.raises(TemplateFieldError) as err:
        _render(dag, op, {"v": value})
    assert err.value.field == "cluster_spec.args[0]"


@pytest.mark.parametrize("native", [False, True], ids=["text", "native"])
def test_expressions_that_write_text_spellings_are_kept(native: bool) -> None:
    args = [
        "{{ '--lr=' ~ params.lr }}",
        "{{ '--n=%d' % params.n }}",
        "{{ params.n % 2 }}",
        "{{ '%(a)s' % {'a': params.lr} }}",
        "{{ '--lr={}'.format(params.lr) }}",
        "{{ params.xs | join(',') }}",
        "{{ params.rows | join(',', attribute='k') }}",
        "{{ ds | replace('-', '') }}",
        "{{ params.s | upper }}",
        "{{ '--v=' ~ params.none | string }}",
        "{{ '--v=' ~ params.xs | tojson }}",
        "{{ '--e=' ~ params.e }}",
    ]
    spec = {**SPEC, "args": args}
    dag, op = _in_dag(lambda: TFTrainingOperator(task_id="t", backend="local", cluster_spec=spec), native)
    params = {"lr": 0.5, "n": 7, "xs": ["a", 1], "rows": [{"k": "r"}], "s": "ab", "none": None, "e": ""}
    op.render_template_fields({"params": params, "dag": dag, "ds": "2026-01-02"}, dag.get_template_env())
    assert [str(a) for a in op.cluster_spec["args"]] == [
        "--lr=0.5",
        "--n=7",
        "1",
        "0.5",
        "--lr=0.5",
        "a,1",
        "r",
        "20260102",
        "AB",
        "--v=None",
        '--v=["a", 1]',
        "--e=",
    ]


@pytest.mark.parametrize("native", [False, True], ids=["text", "native"])
def test_a_boolean_spelt_by_a_case_filter_is_the_authors_spelling(native: bool) -> None:
    """``--debug={{ params.debug | lower }}`` spells a boolean on purpose (the README's
    own example); a null or a list through the same filter still is Python's repr."""
    spec = {**SPEC, "args": ["--debug={{ params.debug | lower }}", "{{ 'X-' ~ (params.debug | upper) }}"]}
    dag, op = _in_dag(lambda: TFTrainingOperator(task_id="t", backend="local", cluster_spec=spec), native)
    _render(dag, op, {"debug": True})
    assert op.cluster_spec["args"] == ["--debug=true", "X-TRUE"]
    for value in (None, [True]):
        dag, op = _in_dag(lambda: TFTrainingOperator(task_id="t", backend="local", cluster_spec=spec), native)
        with pytest.raises(TemplateFieldError):
            _render(dag, op, {"debug": value})
