"""PublishModelOperator: validation before anything is created, the XCom, backend wiring."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_tfk.errors import SpecError
from airflow_tfk.operators.serving import PublishModelOperator
from airflow_tfk.serving import targets
from airflow_tfk.serving.base import ServingError
from tests.serving.fakes import FakeServing


def context(task_id: str = "publish") -> dict:
    return {
        "ti": SimpleNamespace(
            dag_id="train_and_serve", task_id=task_id, run_id="manual__1", map_index=-1, try_number=1
        )
    }


@pytest.fixture
def fake(monkeypatch):
    made: list[tuple[str, FakeServing, dict]] = []
    behaviour = {1: "ok", 2: "ok", 3: "fail_load"}

    def get(kind, spec, **config):
        target = FakeServing(spec, behaviour)
        made.append((kind, target, config))
        return target

    monkeypatch.setattr(targets, "get_serving_target", get)
    return made


def test_publish_pushes_model_version_endpoint(fake):
    op = PublishModelOperator(
        task_id="publish",
        model_name="digits",
        claim="models",
        version="2",
        backend="kubernetes",
        kubernetes_conn_id="k8s",
        serving={"keep_versions": 3, "load_timeout_seconds": 5},
    )
    xcom = op.execute(context())
    assert xcom["model_name"] == "digits" and xcom["version"] == 2
    assert xcom["endpoint"] == "fake://digits/labels/stable"
    assert set(xcom) >= {"model_name", "version", "endpoint", "previous_version", "backend"}
    kind, target, config = fake[0]
    assert kind == "kubernetes" and config["conn_id"] == "k8s"
    assert config["identity"].dag_id == "train_and_serve"
    assert target.spec.keep_versions == 3


def test_default_version_is_the_newest_good_one_and_failure_fails_the_task(fake):
    op = PublishModelOperator(
        task_id="publish",
        model_name="digits",
        claim="models",
        backend="local",
        serving={"load_timeout_seconds": 1},
    )
    with pytest.raises(ServingError, match="version 3 .*failed to load"):
        op.execute(context())  # newest = 3, which fails to load
    assert fake[0][2] == {}  # local: no connection, no identity


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"model_name": "bad/name"}, "model_name"),
        ({"claim": None}, "claim"),
        ({"serving": {"replicas": 0}}, "replicas"),
        ({"serving": {"claim": "x"}}, "serving.claim"),
        ({"serving": {"shiny": True}}, "shiny"),
        ({"version": "three"}, "version"),
    ],
)
def test_invalid_input_fails_before_anything_is_created(fake, kwargs, field):
    args = {"task_id": "publish", "model_name": "digits", "claim": "models", **kwargs}
    op = PublishModelOperator(**args)
    with pytest.raises(SpecError) as err:
        op.execute(context())
    assert err.value.field == field
    assert fake == []


def test_bad_backend_is_rejected_at_parse_time():
    with pytest.raises(ValueError, match="backend"):
        PublishModelOperator(task_id="p", model_name="d", claim="m", backend="docker")


def test_templated_fields():
    assert {"model_name", "version", "claim", "serving", "sample_request"} <= set(
        PublishModelOperator.template_fields
    )
