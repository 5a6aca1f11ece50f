"""The example DAGs' settings from the environment (airflow_tfk/defaults.py)."""

from __future__ import annotations

import importlib

import pytest

from airflow_tfk import defaults
from airflow_tfk.errors import SpecError
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec


@pytest.fixture
def reload_defaults(monkeypatch: pytest.MonkeyPatch):
    def load(**env: str):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return importlib.reload(defaults)

    yield load
    monkeypatch.undo()
    importlib.reload(defaults)


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
