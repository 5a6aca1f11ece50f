"""A training task whose downstream publish is for another model than its args export
refuses to start: nothing is created, and the message names both fields."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.sdk import DAG

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.operators.training import TFTrainingOperator
from tests.helpers import task_context


def _dag(model_name: str, publish_name: str) -> TFTrainingOperator:
    with DAG("names", schedule=None):
        train = TFTrainingOperator(
            task_id="train",
            backend="local",
            cluster_spec={
                "image": "local/unused:1",
                "mode": "all_reduce",
                "command": ["python", "-c", "print('never started')"],
                "args": ["--tfk_model_name", model_name],
                "worker": {"replicas": 1},
            },
        )
        train >> TFPublishModelOperator(
            task_id="publish", backend="local", model_name=publish_name, claim="tfk-models"
        )
    return train


def test_a_publish_of_another_model_stops_the_training_before_its_cluster(local_root: Path) -> None:
    train = _dag("digits_v2", "digits")
    with pytest.raises(SpecError) as info:
        train.execute(task_context(dag_id="names"))
    assert info.value.field == "model_name of task 'publish'"
    assert "is 'digits', but cluster_spec.args gives --tfk_model_name 'digits_v2'" in str(info.value)
    assert LocalBackend(str(local_root)).find(None, {}) == []


def test_a_templated_publish_name_is_not_known_before_the_run() -> None:
    from airflow_tfk.operators._publish_names import check_downstream_publish
    from airflow_tfk.spec.cluster import TFClusterSpec

    train = _dag("digits_v2", "{{ params.model }}")
    spec = TFClusterSpec.from_dict({**train.cluster_spec, "name": "n"})
    check_downstream_publish(train, spec)  # nothing to compare yet
    check_downstream_publish(_dag("digits_v2", "digits_v2"), spec)
