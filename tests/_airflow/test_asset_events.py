"""The extra of a training's model event and of a publish's serving event, written
through Airflow's own outlet-event accessors."""

from __future__ import annotations

import json
from types import SimpleNamespace

from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_tfk._airflow.asset_events import record_publish, record_training, triggering_model_event
from airflow_tfk._airflow.assets import data_asset, model_asset, serving_asset
from tests.helpers import task_context

RESULT = {
    "name": "tfk-train-1",
    "outcome": "succeeded",
    "metrics": {"accuracy": 0.93, "loss": float("nan")},
    "eval_metrics": {"accuracy": 0.91, "step": 600},
    "export": {"model_name": "digits", "version": 7, "path": "/models/digits/7"},
    "model_version": 7,
    "usage": {
        "per_role": {"worker": {"seconds": 10.0, "core_seconds": 20.0}},
        "total": {
            "seconds": 10.0,
            "core_seconds": 20.0,
            "memory_gib_seconds": 40.0,
            "accelerator_seconds": 0.0,
        },
        "tasks": 1,
        "cost": 0.5,
        "currency": "USD",
    },
}


def test_training_event_carries_version_metrics_and_run() -> None:
    digits, other = model_asset("digits", claim="m"), model_asset("other", claim="m")
    data = data_asset("d")
    context = {**task_context(run_id="manual__7"), "outlet_events": OutletEventAccessors()}
    filled = record_training(context, [data, digits, other], RESULT)
    assert filled == [digits.uri]
    extra = context["outlet_events"][digits].extra
    assert extra["version"] == 7 and extra["metrics"]["accuracy"] == 0.93
    assert extra["metrics"]["loss"] == "nan"  # JSON has no NaN: Airflow must store it
    assert extra["eval_metrics"]["step"] == 600 and extra["cluster"] == "tfk-train-1"
    assert extra["run"] == {
        "dag_id": "dag",
        "run_id": "manual__7",
        "task_id": "train",
        "map_index": -1,
        "try_number": 1,
    }
    # what the training held and cost, its total
    assert extra["usage"] == {**RESULT["usage"]["total"], "cost": 0.5, "currency": "USD"}
    json.dumps(extra, allow_nan=False)
    assert context["outlet_events"][other].extra == {}
    assert context["outlet_events"][data].extra == {}


def test_a_training_without_export_still_names_its_run() -> None:
    model = model_asset("digits", claim="m")
    context = {**task_context(), "outlet_events": OutletEventAccessors()}
    record_training(context, [model], {"name": "c", "outcome": "succeeded"})
    assert context["outlet_events"][model].extra["run"]["task_id"] == "train"
    assert "version" not in context["outlet_events"][model].extra
    assert "usage" not in context["outlet_events"][model].extra


def test_publish_event() -> None:
    serving = serving_asset("digits", backend="local")
    context = {**task_context(task_id="publish"), "outlet_events": OutletEventAccessors()}
    result = {
        "model_name": "digits",
        "version": 7,
        "previous_version": 6,
        "endpoint": "http://x/stable",
        "backend": "local",
        "metrics": {"accuracy": 0.9},
    }
    assert record_publish(context, [serving], result) == [serving.uri]
    extra = context["outlet_events"][serving].extra
    assert (extra["version"], extra["previous_version"], extra["endpoint"]) == (7, 6, "http://x/stable")


def test_no_outlet_events_in_the_context_is_no_error() -> None:
    assert record_training(task_context(), [model_asset("digits", claim="m")], RESULT) == []


def test_triggering_model_event_is_the_newest_of_that_model() -> None:
    def event(version, stamp, model="digits"):
        return SimpleNamespace(extra={"model_name": model, "version": version}, timestamp=stamp)

    asset = model_asset("digits", claim="m")
    events = {
        asset: [
            event(3, "2026-01-01T00:00:02"),
            event(2, "2026-01-01T00:00:01"),
            event(9, "2026-01-01T00:00:03", "x"),
        ]
    }
    assert triggering_model_event({"triggering_asset_events": events}, "digits")["version"] == 3
    assert triggering_model_event({"triggering_asset_events": events}, "other") is None
    assert triggering_model_event({}, "digits") is None
