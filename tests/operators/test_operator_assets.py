"""The training and publish operators as asset producers: what they declare at parse time
and what their events say; a publish scheduled on the model asset publishes the version
the event announced."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_tfk._airflow.assets import data_asset, model_asset, serving_asset
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.operators.training import TFTrainingOperator
from airflow_tfk.serving import targets
from tests.helpers import task_context
from tests.serving.fakes import FakeServing

SPEC = {
    "image": "tensorflow/tensorflow:2.21.0",
    "namespace": "ml",
    "mode": "all_reduce",
    "command": ["python", "train.py"],
    "args": ["--tfk_model_name", "digits"],
    "worker": {"replicas": 2},
    "storage": {"data": {"claim": "tfk-data"}, "models": {"claim": "tfk-models"}},
}


def test_a_training_declares_its_data_and_model() -> None:
    op = TFTrainingOperator(task_id="train", backend="local", cluster_spec=SPEC)
    assert op.inlets == [data_asset("tfk-data", namespace="ml")]
    assert op.outlets == [model_asset("digits", claim="tfk-models", namespace="ml")]


def test_given_inlets_and_outlets_win() -> None:
    mine = model_asset("digits", base_path="/srv/models")
    op = TFTrainingOperator(task_id="train", backend="local", cluster_spec=SPEC, outlets=[mine])
    assert (op.inlets, op.outlets) == ([], [mine])


def test_a_finished_training_fills_its_model_event() -> None:
    op = TFTrainingOperator(task_id="train", backend="local", cluster_spec=SPEC)
    context = {**task_context(), "outlet_events": OutletEventAccessors()}
    result = {"outcome": "succeeded", "export": {"model_name": "digits", "version": 4}, "metrics": {"a": 1}}
    assert op._record(context, result) is result
    extra = context["outlet_events"][op.outlets[0]].extra
    assert (extra["version"], extra["metrics"]) == (4, {"a": 1})


@pytest.fixture
def fake(monkeypatch):
    made: list[FakeServing] = []

    def get(kind, spec, **config):
        made.append(FakeServing(spec, {1: "ok", 2: "ok", 3: "ok"}))
        return made[-1]

    monkeypatch.setattr(targets, "get_serving_target", get)
    return made


def test_a_publish_on_the_model_asset_publishes_the_announced_version(fake) -> None:
    op = TFPublishModelOperator(task_id="publish", model_name="digits", claim="tfk-models", backend="local")
    assert op.outlets == [serving_asset("digits", backend="local")]
    assert [a.uri for a in op.inlets] == [model_asset("digits", claim="tfk-models").uri]
    event = SimpleNamespace(
        extra={"model_name": "digits", "version": 2, "metrics": {"accuracy": 0.9}}, timestamp="t"
    )
    context = {
        **task_context(task_id="publish"),
        "outlet_events": OutletEventAccessors(),
        "triggering_asset_events": {op.inlets[0]: [event]},
    }
    # version 3 is the newest exported: the event, not the store, decides
    assert op.execute(context)["version"] == 2
    assert fake[0].recorded == {2: {"accuracy": 0.9}}
    extra = context["outlet_events"][op.outlets[0]].extra
    assert (extra["version"], extra["endpoint"]) == (2, "fake://digits/labels/stable")
