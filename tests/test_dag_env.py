"""What DAG files read from the environment (airflow_tfk/dag_env.py), over the defaults table."""

from __future__ import annotations

import importlib

import pytest

from airflow_tfk import dag_env
from airflow_tfk.core import constants
from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec


@pytest.fixture
def reload_defaults(monkeypatch: pytest.MonkeyPatch):
    def load(**env: str):
        for name in ("TFK_BACKEND", "TFK_KUBERNETES_CONN_ID", "TFK_IMAGE", "TFK_NAMESPACE"):
            monkeypatch.delenv(name, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return importlib.reload(dag_env)

    yield load
    monkeypatch.undo()
    importlib.reload(dag_env)


def test_proxy_source_is_discovered_unless_given(reload_defaults) -> None:
    assert reload_defaults().PROXY_POLICY == {}
    assert reload_defaults(TFK_API_SERVER_CIDRS=" , ").PROXY_POLICY == {}
    got = reload_defaults(TFK_API_SERVER_CIDRS="10.88.0.1/32, 192.168.0.0/24").PROXY_POLICY
    assert got == {"network_policy": {"api_server_cidrs": ["10.88.0.1/32", "192.168.0.0/24"]}}
    # what the DAG builds from it is a valid serving and TensorBoard spec
    assert ServingSpec.from_dict(
        {"model_name": "digits", "claim": "tfk-models", **got}
    ).network_policy.api_server_cidrs == (
        "10.88.0.1/32",
        "192.168.0.0/24",
    )
    assert TensorBoardSpec.from_dict(
        {"name": "tb", "claim": "tfk-logs", **got}
    ).network_policy.api_server_cidrs


def test_a_bad_block_is_refused_naming_the_field(reload_defaults) -> None:
    got = reload_defaults(TFK_API_SERVER_CIDRS="10.88.0.1/33").PROXY_POLICY
    with pytest.raises(SpecError, match="api_server_cidrs"):
        ServingSpec.from_dict({"model_name": "digits", "claim": "tfk-models", **got})


def test_unset_means_the_tables_defaults_and_kubernetes(reload_defaults) -> None:
    env = reload_defaults()
    assert env.BACKEND == constants.BACKEND == "kubernetes"
    assert (env.KUBERNETES_CONN_ID, env.IMAGE, env.NAMESPACE) == (
        constants.KUBERNETES_CONN_ID,
        constants.IMAGE,
        constants.NAMESPACE,
    )
    # whether to defer is Airflow's [operators] default_deferrable, not a DAG argument
    assert env.DEFAULT_ARGS == {"backend": "kubernetes", "kubernetes_conn_id": "kubernetes_default"}


def test_the_environment_overrides_and_local_is_chosen_by_name(reload_defaults) -> None:
    env = reload_defaults(TFK_BACKEND="local", TFK_NAMESPACE="ml", TFK_IMAGE="reg/img:1")
    assert (env.BACKEND, env.NAMESPACE, env.IMAGE) == ("local", "ml", "reg/img:1")
    assert env.DEFAULT_ARGS["backend"] == "local"


def test_a_bad_backend_names_the_variable(reload_defaults) -> None:
    with pytest.raises(ValueError, match="TFK_BACKEND: must be 'kubernetes' or 'local'"):
        reload_defaults(TFK_BACKEND="locl")
