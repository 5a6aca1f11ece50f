"""A training becomes a DAG of the provider's operators; what Airflow would reject when
bagging it is rejected here, naming the field."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dagfactory.builder import build_dag
from airflow_tfk.dagfactory.training import parse_training

STORAGE = {"logs": {"claim": "tfk-logs"}, "models": {"claim": "tfk-models"}}
CLUSTER = {
    "image": "airflow-tfk/training:2.21.0",
    "mode": "all_reduce",
    "command": ["python", "train.py"],
    "args": ["--steps", "{{ params.steps }}"],
    "worker": {"replicas": "{{ params.workers }}"},
    "storage": STORAGE,
}
PARAMS = {"steps": 100, "workers": {"default": 2, "type": "integer", "minimum": 1, "title": "Workers"}}


def build(**data):
    data = {"cluster": dict(CLUSTER), "params": dict(PARAMS), **data}
    return build_dag(parse_training(data, default_dag_id="t", source="t.yaml"), "cluster: {}\n")


def build_error(**data) -> SpecError:
    with pytest.raises(SpecError) as info:
        build(**data)
    return info.value


def test_full_dag() -> None:
    dag = build(
        schedule="*/30 * * * *",
        previous_run_policy="wait",
        max_duration_minutes=45,
        retries=2,
        retry_delay_seconds=60,
        owners=["a", "b"],
        tags=["x"],
        backend="local",
        deferrable=True,
        tensorboard=True,
        publish={"model_name": "m", "serving": {"replicas": 2}},
    )
    assert dag.timetable.expression == "*/30 * * * *"
    assert dag.dagrun_timeout == timedelta(minutes=55) and dag.max_active_runs == 2
    assert dag.render_template_as_native_obj
    assert dag.tags >= {"airflow-tfk", "dag-as-code", "x"}
    assert dag.params["workers"] == 2 and dag.params.get_param("workers").schema["title"] == "Workers"
    train = dag.get_task("train")
    assert (train.backend, train.deferrable, train.previous_run_policy) == ("local", True, "wait")
    assert train.execution_timeout == timedelta(minutes=45)
    assert (train.retries, train.retry_delay, train.owner) == (2, timedelta(seconds=60), "a, b")
    assert dag.get_task("publish").upstream_task_ids == {"train"}
    assert dag.get_task("publish").claim == "tfk-models"
    assert dag.get_task("tensorboard").claim == "tfk-logs"
    assert dag.get_task("tensorboard").upstream_task_ids == set()  # alongside the training
    assert "```yaml\ncluster: {}\n```" in dag.doc_md


def test_templated_spec_renders_natively() -> None:
    """The params reach the spec as ints, and the rendered spec is the spec's to validate."""
    from airflow_tfk.run.lifecycle import resolve_spec

    dag = build()
    train = dag.get_task("train")
    context = {"params": {"steps": 7, "workers": 5}}
    train.render_template_fields(context, dag.get_template_env())
    assert "name" not in train.cluster_spec  # derived from the task instance at run time
    assert train.cluster_spec["worker"]["replicas"] == 5 and train.cluster_spec["args"] == ["--steps", 7]
    rendered = {**train.cluster_spec, "name": "tfk-train-0123abcd"}
    assert resolve_spec(rendered, None).worker.replicas == 5
    with pytest.raises(SpecError, match="worker.replicas"):
        resolve_spec({**rendered, "worker": {"replicas": 0}}, None)


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"schedule": "0 99 * * *"}, "schedule", "out of range"),
        ({"schedule": "every day"}, "schedule", "columns"),
        (
            {"params": {**PARAMS, "steps": {"default": "many", "type": "integer"}}},
            "params.steps",
            "not of type",
        ),
        (
            {"schedule": "@daily", "params": {**PARAMS, "steps": {"default": "many", "type": "integer"}}},
            "params.steps",
            "not of type",
        ),
        (
            {"schedule": "@daily", "params": {**PARAMS, "steps": {"default": 1, "type": "integr"}}},
            "params.steps",
            "invalid default or schema",
        ),
        (
            {"params": {**PARAMS, "steps": {"default": 1, "type": "integr"}}},
            "params.steps",
            "invalid default or schema",
        ),
        (
            {"schedule": "@daily", "params": {**PARAMS, "steps": {"type": "integer"}}},
            "params.steps.default",
            "required",
        ),
        ({"publish": {"model_name": "m", "serving": {"replicas": -1}}}, "publish.serving.replicas", ""),
        ({"publish": {"model_name": "bad name"}}, "publish.model_name", ""),
        ({"tensorboard": {"claim": "Bad_Claim"}}, "tensorboard.claim", ""),
    ],
)
def test_airflow_side_errors_name_the_field(data: dict, field: str, words: str) -> None:
    exc = build_error(**data)
    assert exc.field == field and words in str(exc), str(exc)


def test_templated_publish_options_are_left_to_run_time() -> None:
    dag = build(params={**PARAMS, "model": "m"}, publish={"model_name": "{{ params.model }}"})
    assert dag.get_task("publish").model_name == "{{ params.model }}"


def test_manual_training_may_have_params_without_default() -> None:
    dag = build(params={**PARAMS, "note": {"type": "string"}})
    assert "note" in dag.params


def test_publish_quality_gate_is_passed_through_and_checked() -> None:
    dag = build(publish={"model_name": "m", "quality_gate": {"thresholds": {"accuracy": 0.9}}})
    assert dag.get_task("publish").quality_gate == {"thresholds": {"accuracy": 0.9}}
    exc = build_error(publish={"model_name": "m", "quality_gate": {"tresholds": {"accuracy": 0.9}}})
    assert exc.field == "publish.quality_gate.tresholds", str(exc)


def test_a_training_file_without_backend_targets_kubernetes(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no ``backend:`` and no ``TFK_BACKEND``, every task of the DAG runs on the
    cluster, never as processes beside the scheduler; local is chosen only by name."""
    import importlib

    from airflow_tfk import dag_env

    monkeypatch.delenv("TFK_BACKEND", raising=False)
    importlib.reload(dag_env)
    try:
        dag = build(tensorboard=True, publish={"model_name": "m"})
        assert {t.task_id: t.backend for t in dag.tasks} == dict.fromkeys(
            ("tensorboard", "train", "publish"), "kubernetes"
        )
        assert build(backend="local").get_task("train").backend == "local"
        monkeypatch.setenv("TFK_BACKEND", "local")  # what `airflow-tfk airflow` sets
        importlib.reload(dag_env)
        assert build().get_task("train").backend == "local"
        assert build(backend="kubernetes").get_task("train").backend == "kubernetes"
    finally:
        monkeypatch.undo()
        importlib.reload(dag_env)
