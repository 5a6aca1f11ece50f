"""The publish algorithm on an in-memory target: every way a version can fail leaves the
serving version in place; success moves the label and keeps N versions."""

from __future__ import annotations

import pytest

from airflow_tfk.protocol.model_config import ModelConfig, ModelServerConfig, parse
from airflow_tfk.serving.base import ServingError
from airflow_tfk.serving.publish import kept_versions, publish
from airflow_tfk.serving.spec import ServingSpec
from tests.serving.fakes import FakeServing


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


def run(target: FakeServing, version: int | None = None, **kw):
    clock = Clock()
    return publish(target, version, emit=lambda _: None, sleep=clock.sleep, clock=clock, **kw)


def make(behaviour: dict[int, str], keep: int = 2) -> FakeServing:
    spec = ServingSpec(model_name="digits", claim="models", keep_versions=keep, load_timeout_seconds=30)
    return FakeServing(spec, behaviour)


def model(target: FakeServing) -> ModelConfig | None:
    return target.config.get("digits") if target.config else None


def test_first_publish_and_upgrades_keep_n_versions():
    target = make({1: "ok", 2: "ok", 3: "ok"})
    first = run(target, 1)
    assert first.previous_version is None and model(target).versions == (1,)
    assert model(target).stable == 1
    second = run(target)  # newest
    assert (second.version, second.previous_version, second.kept_versions) == (3, 1, (1, 3))
    third = run(target, 2)
    assert third.kept_versions == (2, 3) and model(target).stable == 2
    assert third.to_dict()["endpoint"] == "fake://digits/labels/stable"
    assert third.to_dict()["predict_url"] == "fake://digits/labels/stable:predict"


@pytest.mark.parametrize(
    "how,message",
    [
        ("fail_load", "failed to load: DATA_LOSS: corrupt"),
        ("never", "did not become AVAILABLE within 30 s"),
        ("bad_predict", "HTTP 400: wrong shape"),
        ("empty", "holds no predictions"),
        ("wrong_count", "2 instances sent, 1 predictions received"),
    ],
)
def test_failed_version_never_replaces_the_serving_one(how, message):
    target = make({1: "ok", 2: how})
    run(target, 1)
    before = target.config
    with pytest.raises(ServingError, match=message) as err:
        run(target, 2)
    assert "version 1 is still serving" in str(err.value)
    assert target.config == before
    assert model(target).versions == (1,) and model(target).stable == 1
    # the candidate was offered next to the serving version, then withdrawn
    assert target.writes[-2].get("digits").versions == (1, 2)
    assert target.writes[-2].get("digits").stable == 1


def test_first_version_failing_removes_the_model():
    target = make({1: "fail_load"})
    target.config = ModelServerConfig((ModelConfig("other", "/models/other", versions=(4,)),))
    with pytest.raises(ServingError, match="no version was serving before"):
        run(target, 1)
    assert model(target) is None and target.config.get("other").versions == (4,)


def test_no_sample_request_fails_before_touching_the_config():
    target = make({1: "ok"})
    target.sample_request = lambda version: None
    with pytest.raises(ServingError, match="no sample request"):
        run(target, 1)
    assert target.writes == []
    assert run(target, 1, sample_request={"instances": [[1.0]]}).version == 1


def test_nothing_exported():
    with pytest.raises(ServingError, match="no exported version"):
        run(make({}))


def test_republishing_the_serving_version_is_a_no_op():
    target = make({1: "ok"})
    run(target, 1)
    writes = len(target.writes)
    assert run(target, 1).version == 1
    assert len(target.writes) == writes


def test_kept_versions_prefers_new_then_previous():
    m = ModelConfig("m", "/b", versions=(1, 2, 5), labels={"stable": 2})
    assert kept_versions(m, 7, 2) == (2, 7)
    assert kept_versions(m, 7, 3) == (2, 5, 7)
    assert kept_versions(m, 7, 1) == (7,)


def test_model_config_round_trip_and_foreign_syntax():
    cfg = ModelServerConfig(
        (
            ModelConfig("digits", '/models/we"ird', versions=(3, 4), labels={"stable": 3}),
            ModelConfig("latest", "/models/latest"),
        )
    )
    assert parse(cfg.to_text()) == ModelServerConfig(tuple(sorted(cfg.models, key=lambda m: m.name)))
    text = """
    # written by hand
    model_config_list: {
      config: { name: 'a' base_path: "/m/" "a" model_platform: "tensorflow"
                model_version_policy: { specific: { versions: [1, 2] } } }
      config < name: "b" base_path: "/m/b" version_labels { key: "canary" value: 9 } >
    }"""
    a, b = parse(text).models
    assert (a.name, a.base_path, a.versions) == ("a", "/m/a", (1, 2))
    assert (b.versions, dict(b.labels)) == ((), {"canary": 9})
