"""``OnBackendOperator``: the backend, its options and the connection, for every operator
that acts on a backend."""

from __future__ import annotations

import pytest

from airflow_tfk.operators.cluster import TFCreateClusterOperator
from airflow_tfk.operators.serving import TFStopModelServerOperator
from airflow_tfk.operators.sweeper import TFSweepOrphansOperator
from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator
from airflow_tfk.operators.training import TFTrainingOperator

SPEC = {"name": "c", "image": "i:1", "command": ["python"], "worker": {}}


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: TFCreateClusterOperator(task_id="t", cluster_spec=SPEC, **kw),
        lambda **kw: TFTrainingOperator(task_id="t", cluster_spec=SPEC, **kw),
        lambda **kw: TFSweepOrphansOperator(task_id="t", **kw),
        lambda **kw: TFStopModelServerOperator(model_name="m", **kw),
        lambda **kw: TFStartTensorBoardOperator(claim="logs", **kw),
    ],
)
def test_every_backend_operator_passes_the_connection_on_kubernetes_only(make) -> None:
    on_k8s = make(backend="kubernetes", backend_config={"field_manager": "f"}, kubernetes_conn_id="k")
    assert on_k8s.backend_options() == {"field_manager": "f", "conn_id": "k"}
    assert make(backend="kubernetes", backend_config={"conn_id": "mine"}).backend_options() == {
        "conn_id": "mine"
    }
    local = make(backend="local", backend_config={"root": "/r"}, kubernetes_conn_id="k")
    assert (local.backend, local.backend_options()) == ("local", {"root": "/r"})
    assert make().backend == "kubernetes" and make().kubernetes_conn_id == "kubernetes_default"
