"""TFPublishModelOperator: validation before anything is created, the XCom, backend wiring."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.serving import targets
from airflow_tfk.serving.base import NotBlessed, ServingError
from tests.serving.fakes import FakeServing


def context(task_id: str = "publish") -> dict:
    return {
        "ti": SimpleNamespace(
            dag_id="train_and_serve", task_id=task_id, run_id="manual__1", map_index=-1, try_number=1
        )
    }


def publish(**kwargs) -> TFPublishModelOperator:
    """The task that publishes model ``digits`` from claim ``models``."""
    return TFPublishModelOperator(task_id="publish", model_name="digits", claim="models", **kwargs)


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
    op = publish(
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
    op = publish(
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
        ({"quality_gate": {"thresholds": {"accuracy": "x"}}}, "quality_gate.thresholds.accuracy"),
        ({"quality_gate": {"thresholds": {"a": 1}, "on_failure": "pass"}}, "quality_gate.on_failure"),
        ({"metrics": "{not json"}, "metrics"),
        ({"serving": {"smoke_protocol": "http2"}}, "smoke_protocol"),
        ({"serving": {"batching": {"max_batch_size": 0}}}, "batching.max_batch_size"),
    ],
)
def test_invalid_input_fails_before_anything_is_created(fake, kwargs, field):
    args = {"task_id": "publish", "model_name": "digits", "claim": "models", **kwargs}
    op = TFPublishModelOperator(**args)
    with pytest.raises(SpecError) as err:
        op.execute(context())
    assert err.value.field == field
    assert fake == []


def test_bad_backend_is_rejected_at_parse_time():
    with pytest.raises(ValueError, match="backend"):
        TFPublishModelOperator(task_id="p", model_name="d", claim="m", backend="docker")


def test_templated_fields():
    assert {"model_name", "version", "claim", "serving", "sample_request"} <= set(
        TFPublishModelOperator.template_fields
    )


@pytest.mark.parametrize(("on_failure", "outcome"), [("fail", NotBlessed), ("skip", AirflowSkipException)])
def test_a_version_that_is_not_blessed_fails_or_skips_and_is_not_published(fake, on_failure, outcome):
    op = publish(
        version=2,
        backend="local",
        quality_gate={"thresholds": {"accuracy": 0.9}, "on_failure": on_failure},
        metrics='{"accuracy": 0.8}',  # as a template renders an XCom
    )
    with pytest.raises(outcome, match=r"accuracy 0.8 fails the threshold >= 0.9 \(by 0.1\)"):
        op.execute(context())
    target = fake[0][1]
    assert target.writes == [] and target.ensured == 0


def test_a_blessed_version_is_published_with_its_metrics_recorded(fake):
    op = publish(
        version=2,
        backend="local",
        quality_gate={"thresholds": {"accuracy": 0.9}},
        metrics={"accuracy": 0.97},
    )
    assert op.execute(context())["version"] == 2
    assert fake[0][1].recorded == {2: {"accuracy": 0.97}}


def test_the_upstream_trainings_metrics_feed_the_gate(fake):
    xcom = {"export": {"model_name": "digits", "version": 2}, "metrics": {"accuracy": 0.5}}
    ctx = context()
    ctx["ti"].xcom_pull = lambda task_ids: xcom if task_ids == "train" else None
    op = publish(
        backend="local",
        quality_gate={"thresholds": {"accuracy": 0.9}},
    )
    op.upstream_task_ids.add("train")  # as `train >> publish` would
    with pytest.raises(NotBlessed, match=r"digits version 2 is not blessed.*accuracy 0.5 fails"):
        op.execute(ctx)
    xcom["metrics"] = {"accuracy": 0.95}
    assert op.execute(ctx)["version"] == 2
    assert fake[-1][1].recorded == {2: {"accuracy": 0.95}}
