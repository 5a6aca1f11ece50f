"""``schedule:`` on assets in a training file: checked as data, naming the path of the
error; built into Airflow's asset conditions."""

from __future__ import annotations

import pytest
from airflow.sdk import AssetAll, AssetAny

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dag_env import NAMESPACE
from airflow_tfk.dagfactory.asset_schedule import airflow_schedule, parse_asset_schedule
from airflow_tfk.dagfactory.builder import build_dag
from airflow_tfk.dagfactory.training import parse_training

CLUSTER = {
    "image": "airflow-tfk/training:2.21.0",
    "mode": "all_reduce",
    "command": ["python", "train.py"],
    "args": ["--tfk_model_name", "digits"],
    "worker": {"replicas": 2},
    "storage": {"logs": {"claim": "tfk-logs"}, "models": {"claim": "tfk-models"}},
}


def test_a_list_is_all_of_its_assets_and_conditions_nest() -> None:
    parsed = parse_asset_schedule([{"data": {"claim": "tfk-data", "path": "digits"}}, "some-asset"])
    assert parsed == {"all": [{"data": {"claim": "tfk-data", "path": "digits"}}, "some-asset"]}
    built = airflow_schedule(
        parse_asset_schedule(
            {"any": [{"model": {"model_name": "m", "claim": "c"}}, {"all": ["x-a://b", "n"]}]}
        )
    )
    assert isinstance(built, AssetAny)
    first, nested = built.objects
    assert first.uri.startswith("x-tfk-pvc://c/m?namespace=")
    assert isinstance(nested, AssetAll)
    assert [type(o).__name__ for o in nested.objects] == ["AssetUriRef", "AssetNameRef"]


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"anyy": []}, "schedule.anyy"),
        ({"any": []}, "schedule.any"),
        ([5], "schedule.all[0]"),
        ([""], "schedule.all[0]"),
        ([{"data": {"claim": "d", "paht": "x"}}], "schedule.all[0].data.paht"),
        ([{"data": {"claim": "d", "path": "../x"}}], "schedule.all[0].data.path"),
        ([{"model": {"claim": "c"}}], "schedule.all[0].model.model_name"),
        ({"any": [{"data": "tfk-data"}]}, "schedule.any[0].data"),
        ({"any": [{"data": {"claim": "d"}, "model": {}}]}, "schedule.any[0]"),
    ],
)
def test_errors_name_their_path(value, field) -> None:
    with pytest.raises(SpecError) as info:
        parse_asset_schedule(value)
    assert info.value.field == field


def test_depth_and_count_are_bounded() -> None:
    deep: object = "a"
    for _ in range(10):
        deep = {"any": [deep]}
    with pytest.raises(SpecError, match="deeper"):
        parse_asset_schedule(deep)
    with pytest.raises(SpecError, match="more than"):
        parse_asset_schedule([f"asset-{i}" for i in range(100)])


def test_a_training_file_scheduled_on_data_retrains_and_its_train_task_declares_the_model() -> None:
    training = parse_training(
        {
            "cluster": dict(CLUSTER),
            "schedule": {"any": [{"data": {"claim": "tfk-data", "path": "digits"}}, "late-data"]},
        },
        default_dag_id="retrain",
        source="retrain.yaml",
    )
    dag = build_dag(training)
    assert type(dag.timetable).__name__ == "AssetTriggeredTimetable"
    assert isinstance(dag.timetable.asset_condition, AssetAny)
    outlets = dag.get_task("train").outlets
    assert [a.uri for a in outlets] == [f"x-tfk-pvc://tfk-models/digits?namespace={NAMESPACE}"]


def test_a_training_file_with_a_bad_asset_schedule_names_the_field() -> None:
    with pytest.raises(SpecError) as info:
        parse_training(
            {"cluster": dict(CLUSTER), "schedule": [{"serving": {"namespace": "x"}}]},
            default_dag_id="t",
            source="t.yaml",
        )
    assert info.value.field == "schedule.all[0].serving.model_name"
