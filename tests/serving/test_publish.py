"""The publish algorithm on an in-memory target: every way a version can fail leaves the
serving version in place; success moves the label and keeps N versions."""

from __future__ import annotations

import pytest

from airflow_tfk.core.deadline import Clock
from airflow_tfk.core.errors import SpecError
from airflow_tfk.protocol.model_config import ModelConfig, ModelServerConfig, parse
from airflow_tfk.serving.base import NotBlessed, ServingError
from airflow_tfk.serving.gate import QualityGate
from airflow_tfk.serving.publish import kept_versions, publish
from airflow_tfk.serving.spec import ServingSpec
from tests.serving.fakes import FakeServing


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.01)


def run(target: FakeServing, version: int | None = None, **kw):
    time = FakeTime()
    kw.setdefault("emit", lambda _: None)
    return publish(target, version, clock=Clock(time, time.sleep), **kw)


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
    # the candidate was loaded under its own name only, then withdrawn: the model's own
    # entry (what clients call) never held it
    offered = target.writes[-2]
    assert offered.get("digits-tfk-candidate").versions == (2,)
    assert all(w.get("digits").versions == (1,) for w in target.writes[1:])
    assert target.config.get("digits-tfk-candidate") is None
    assert ("digits", 2) not in target.predicted  # the smoke test went to the candidate


def test_promotion_loads_the_validated_version_before_the_label_moves():
    target = make({1: "ok", 2: "ok"})
    run(target, 1)
    start = len(target.writes)
    run(target, 2)
    cand, loading, final = target.writes[start:]
    assert cand.get("digits-tfk-candidate").versions == (2,) and cand.get("digits").versions == (1,)
    assert loading.get("digits").versions == (1, 2) and loading.get("digits").stable == 1
    assert final.get("digits").stable == 2 and final.get("digits-tfk-candidate") is None


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


# -- the quality gate ---------------------------------------------------------------------
GATE = QualityGate(thresholds={"accuracy": 0.9}, max_regression=0.01)


def test_gate_blesses_and_records_the_metrics_as_the_next_baseline():
    target = make({1: "ok", 2: "ok"})
    target.exported_metrics = {1: {"accuracy": 0.95, "loss": 0.2}}
    lines: list[str] = []
    run(target, 1, gate=GATE, emit=lines.append)
    assert model(target).stable == 1
    assert target.recorded == {1: {"accuracy": 0.95, "loss": 0.2}}
    assert any("quality gate on digits version 1" in x and "accuracy 0.95 >= 0.9" in x for x in lines)
    # metrics from the training task's XCom win over the exported file
    run(target, 2, gate=GATE, metrics={"accuracy": 0.945})
    assert model(target).stable == 2 and target.recorded[2] == {"accuracy": 0.945}


@pytest.mark.parametrize(
    ("metrics", "failure"),
    [
        ({"accuracy": 0.85}, "accuracy 0.85 fails the threshold >= 0.9 (by 0.05)"),
        (
            {"accuracy": 0.93},
            "accuracy 0.93 regressed by 0.02 against 0.95 of serving version 1 (tolerance 0.01)",
        ),
        ({"loss": 0.1}, "accuracy: missing or not a number in the candidate's metrics"),
        (None, "no metrics for digits version 2"),
    ],
)
def test_gate_refuses_and_nothing_is_touched(metrics, failure):
    target = make({1: "ok", 2: "ok"})
    run(target, 1, gate=GATE, metrics={"accuracy": 0.95})
    writes, ensured = len(target.writes), target.ensured
    with pytest.raises(NotBlessed) as refused:
        run(target, 2, gate=GATE, metrics=metrics)
    assert failure in str(refused.value) and "not blessed" in str(refused.value)
    assert "version 1 is still serving" in str(refused.value) or metrics is None
    assert refused.value.on_failure == "fail"
    assert len(target.writes) == writes and target.ensured == ensured  # nothing touched
    assert model(target).stable == 1 and 2 not in target.recorded


def test_gate_lower_is_better_and_per_metric_tolerances():
    gate = QualityGate(
        thresholds={"loss": 0.5, "accuracy": 0.8},
        lower_is_better=["loss"],
        max_regression={"loss": 0.05},
        on_failure="skip",
    )
    ok = gate.evaluate({"loss": 0.33, "accuracy": 0.81}, {"loss": 0.3, "accuracy": 0.99}, 4)
    assert ok.blessed, ok.failures
    bad = gate.evaluate({"loss": 0.6, "accuracy": 0.81}, {"loss": 0.3}, 4)
    assert bad.failures == (
        "loss 0.6 fails the threshold <= 0.5 (by 0.1)",
        "loss 0.6 regressed by 0.3 against 0.3 of serving version 4 (tolerance 0.05)",
    )


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"thresholds": {"accuracy": "high"}}, "quality_gate.thresholds.accuracy"),
        ({"thresholds": {"accuracy": 0.9}, "on_failure": "ignore"}, "quality_gate.on_failure"),
        ({"max_regression": -0.1}, "quality_gate.max_regression"),
        ({"thresholds": {}}, "quality_gate"),
        ({"thresholds": {"a": 1}, "treshold": 1}, "quality_gate.treshold"),
    ],
)
def test_gate_options_are_validated(options, field):
    with pytest.raises(SpecError) as err:
        QualityGate.from_dict(options)
    assert err.value.field == field
