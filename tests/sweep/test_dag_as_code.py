"""A ``sweep:`` block in a training file gives the DAG of dags/tfk_sweep.py: a sweep task
instead of the training, the publish of its best trial after it."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dagfactory.builder import build_dag
from airflow_tfk.dagfactory.training import parse_training
from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator

CLUSTER = {
    "image": "airflow-tfk/training:2.21.0",
    "mode": "all_reduce",
    "command": ["python", "-m", "airflow_tfk.runtime.examples.digits_app"],
    "args": ["--tfk_steps", "400"],
    "worker": {"replicas": 2},
    "storage": {"logs": {"claim": "tfk-logs"}, "models": {"claim": "tfk-models"}},
}
SWEEP = {
    "n_trials": "{{ params.trials }}",
    "max_concurrent_trials": 2,
    "search_space": {"tfk_learning_rate": {"type": "float", "low": 1e-4, "high": 0.3, "log": True}},
    "objective": "accuracy",
    "direction": "maximize",
    "pruner": {"name": "median", "n_startup_trials": 2},
}


def training(**extra) -> dict:
    return {
        "cluster": dict(CLUSTER),
        "params": {"trials": 6},
        "max_duration_minutes": 30,
        "publish": {"model_name": "digits", "quality_gate": {"thresholds": {"accuracy": 0.85}}},
        "sweep": SWEEP,
        **extra,
    }


def test_a_sweep_block_gives_the_sweep_dag() -> None:
    dag = build_dag(parse_training(training(), default_dag_id="s", source="s.yaml"))
    assert set(dag.task_ids) == {"sweep", "publish"}
    sweep = dag.get_task("sweep")
    assert isinstance(sweep, TFHyperparameterSweepOperator)
    assert sweep.sweep == SWEEP
    assert dag.get_task("publish").upstream_task_ids == {"sweep"}
    # Each trial's cluster keeps the deadline; the sweep task and its run are not cut at 30 min.
    assert sweep.cluster_spec["max_duration_seconds"] == 1800
    assert sweep.execution_timeout is None and dag.dagrun_timeout is None


def test_the_example_sweep_dag_has_the_same_shape() -> None:
    from airflow.dag_processing.dagbag import DagBag

    from tests.helpers import ROOT

    example = DagBag(dag_folder=str(ROOT / "dags" / "tfk_sweep.py")).dags["tfk_sweep"]
    generated = build_dag(parse_training(training(), default_dag_id="s", source="s.yaml"))
    for dag in (example, generated):
        assert {t: sorted(dag.get_task(t).downstream_task_ids) for t in dag.task_ids} == {
            "sweep": ["publish"],
            "publish": [],
        }


@pytest.mark.parametrize(
    ("sweep", "field"),
    [
        ({**SWEEP, "search_space": {"lr": {"low": 0, "high": 1, "log": True}}}, "sweep.search_space.lr.low"),
        ({**SWEEP, "n_trials": 0}, "sweep.n_trials"),
        ({**SWEEP, "pruner": "hyperband"}, "sweep.pruner.name"),
        ("yes", "sweep"),
    ],
)
def test_a_bad_sweep_block_names_its_field(sweep, field: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_training(training(sweep=sweep), default_dag_id="s", source="s.yaml")
    assert info.value.field == field


def test_a_sweep_block_may_only_use_declared_params() -> None:
    with pytest.raises(SpecError, match="params.nope"):
        parse_training(
            training(sweep={**SWEEP, "n_trials": "{{ params.nope }}"}), default_dag_id="s", source="s.yaml"
        )
