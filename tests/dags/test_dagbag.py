"""Every DAG in dags/ parses with zero import errors, and has the shape its doc promises."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    yield mp
    mp.undo()


def test_no_import_errors(dagbag) -> None:
    assert dagbag.import_errors == {}


def test_expected_dags(dagbag) -> None:
    assert {"tfk_quickstart", "tfk_scheduled_training", "tfk_ui_training", "tfk_train_publish"} <= set(
        dagbag.dag_ids
    )


def test_regression_dag_trains_with_an_evaluator_and_publishes_its_own_version(dagbag) -> None:
    dag = dagbag.dags["tfk_regression"]
    train, publish = dag.get_task("train"), dag.get_task("publish")
    assert train.cluster_spec["evaluator"] == {"replicas": 1}
    assert publish.upstream_task_ids == {"train"}
    assert publish.version is None  # the version train exports, from its XCom


def test_scheduled_training_policies(dagbag) -> None:
    dag = dagbag.dags["tfk_scheduled_training"]
    train = dag.get_task("train")
    assert train.execution_timeout is not None
    assert train.cluster_spec["max_duration_seconds"] == train.execution_timeout.total_seconds()
    assert dag.params["previous_run_policy"] == "kill_previous"
    assert dag.timetable.expression == "0 */2 * * *"


def test_ui_training_form_rejects_bad_values(dagbag) -> None:
    from airflow.sdk.definitions.param import ParamValidationError

    params = dagbag.dags["tfk_ui_training"].params
    params.validate()  # the defaults are valid
    for key, bad in [
        ("workers", -1),
        ("workers", 0),
        ("mode", "mirrored"),
        ("image", "a b"),
        ("image", "{{ evil }}"),
        ("steps", "many"),
    ]:
        with pytest.raises(ParamValidationError):
            params.get_param(key).resolve(bad)
