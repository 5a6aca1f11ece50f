"""`TFHyperparameterSweepOperator` checks its arguments in ``__init__``, naming each, as
the training operator does: a bad sweep never gets as far as a study or a cluster."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator

CLUSTER = {"image": "i", "mode": "all_reduce", "command": ["python", "a.py"], "worker": {"replicas": 1}}
SWEEP = {"n_trials": 2, "search_space": {"lr": {"low": 0.001, "high": 0.1}}}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sweep": 5}, "sweep"),
        ({"sweep": None}, "sweep"),
        ({"sweep": ["n_trials"]}, "sweep"),
        ({"sweep": "n_trials: ["}, "sweep"),
        ({"sweep": "n_trials: 0\nsearch_space: {lr: {low: 1, high: 2}}"}, "sweep.n_trials"),
        ({"cluster_spec": None}, "cluster_spec"),
        ({"cluster_spec": 42}, "cluster_spec"),
        ({"name_prefix": "A B\n"}, "name_prefix"),
        ({"sweep": {**SWEEP, "study_name": "a\x1b[2J"}}, "sweep.study_name"),
    ],
)
def test_bad_arguments_name_their_field(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        TFHyperparameterSweepOperator(task_id="s", **{"cluster_spec": CLUSTER, "sweep": SWEEP, **kwargs})
    assert info.value.field == field, str(info.value)


@pytest.mark.parametrize(
    "sweep", [SWEEP, "n_trials: 2\nsearch_space: {lr: {low: 0.1, high: 1}}", "{{ params.s }}"]
)
def test_good_arguments_and_templates_are_accepted(sweep: object) -> None:
    TFHyperparameterSweepOperator(task_id="s", cluster_spec=CLUSTER, sweep=sweep)
