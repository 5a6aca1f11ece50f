"""ServingSpec and TensorBoardSpec: bad input fails with a SpecError naming the field."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec, default_name


def test_defaults():
    s = ServingSpec(model_name="digits", claim="models")
    assert (s.name, s.config_map_name, s.rest_port, s.grpc_port, s.keep_versions) == (
        "tfs-digits",
        "tfs-digits-config",
        8501,
        8500,
        2,
    )
    assert s.pod_base_path == "/tfk/models/digits"
    assert (
        ServingSpec(model_name="d", claim="m", sub_path="exports/").pod_base_path == "/tfk/models/exports/d"
    )
    assert ServingSpec.from_dict({"model_name": "d", "base_path": "/tmp/x"}).claim is None
    assert ServingSpec(model_name="digits", claim="m", resources={"cpu": "1"}).resources.cpu == "1"


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"model_name": ""}, "model_name"),
        ({"model_name": "a/b"}, "model_name"),
        ({"model_name": "x" * 64}, "model_name"),
        ({"model_name": 3}, "model_name"),
        ({"claim": None}, "claim"),  # neither claim nor base_path
        ({"base_path": "/tmp/m"}, "claim"),  # both
        ({"claim": "Bad_Claim"}, "claim"),
        ({"sub_path": "../escape"}, "sub_path"),
        ({"sub_path": "/abs"}, "sub_path"),
        ({"name": "9starts-with-digit"}, "name"),
        ({"name": "a" * 57}, "name"),
        ({"namespace": "Not_A_Namespace"}, "namespace"),
        ({"image": "has space"}, "image"),
        ({"image_pull_policy": "Sometimes"}, "image_pull_policy"),
        ({"image_pull_secrets": ["ok", "Not OK"]}, "image_pull_secrets[1]"),
        ({"replicas": 0}, "replicas"),
        ({"replicas": True}, "replicas"),
        ({"rest_port": 70000}, "rest_port"),
        ({"grpc_port": 8501}, "grpc_port"),
        ({"keep_versions": 0}, "keep_versions"),
        ({"poll_seconds": 0}, "poll_seconds"),
        ({"load_timeout_seconds": "soon"}, "load_timeout_seconds"),
        ({"predict_timeout_seconds": 0}, "predict_timeout_seconds"),
        ({"resources": {"cpu": "lots"}}, "resources.cpu"),
        ({"resources": {"gpu": 1}}, "resources.gpu"),
        ({"labels": {"app.kubernetes.io/name": "x"}}, "labels.app.kubernetes.io/name"),
        ({"labels": {"team": "bad value!"}}, "labels.team"),
        ({"node_selector": {"bad key!": "x"}}, "node_selector.bad key!"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_invalid_serving_spec_names_the_field(changes, field):
    data = {"model_name": "digits", "claim": "models", **changes}
    with pytest.raises(SpecError) as err:
        ServingSpec.from_dict(data)
    assert err.value.field == field


def test_kubernetes_needs_a_claim():
    with pytest.raises(SpecError, match="claim: is required on Kubernetes"):
        ServingSpec(model_name="d", base_path="/tmp/x").require_claim()


def test_derived_names_are_valid_and_distinct():
    a, b = default_name("tfs", "My_Model.v2"), default_name("tfs", "my-model-v2")
    assert a != b and a.startswith("tfs-my-model-v2-") and b == "tfs-my-model-v2"
    assert ServingSpec(model_name="M" * 63, claim="m").name.startswith("tfs-")


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"name": "Bad"}, "name"),
        ({"claim": None}, "claim"),
        ({"port": -1}, "port"),
        ({"reload_seconds": 0}, "reload_seconds"),
        ({"sub_path": "../x"}, "sub_path"),
    ],
)
def test_invalid_tensorboard_spec_names_the_field(changes, field):
    with pytest.raises(SpecError) as err:
        TensorBoardSpec.from_dict({"name": "tb-x", "claim": "logs", **changes})
    assert err.value.field == field


def test_tensorboard_logdir():
    assert TensorBoardSpec(name="tb", claim="logs").pod_logdir == "/tfk/logs"
    assert TensorBoardSpec(name="tb", claim="logs", sub_path="run-1").pod_logdir == "/tfk/logs/run-1"


@pytest.mark.parametrize("cls, field", [(ServingSpec, "model_name"), (TensorBoardSpec, "name")])
def test_a_missing_required_field_is_a_spec_error_naming_it(cls, field):
    # (it was the dataclass's TypeError, which names no field a user wrote)
    with pytest.raises(SpecError) as err:
        cls.from_dict({})
    assert err.value.field == field
