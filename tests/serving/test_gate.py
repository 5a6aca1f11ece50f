"""The quality gate checks what its options say, or refuses the options naming the field:
no option combination may bless a candidate while comparing less than it was told to."""

from __future__ import annotations

import math

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.gate import QualityGate


@pytest.mark.parametrize(
    ("options", "field"),
    [
        # a regression bound that names no metric compares nothing
        ({"max_regression": 0.01}, "quality_gate.max_regression"),
        ({"max_regression": 0}, "quality_gate.max_regression"),
        ({"max_regression": {}}, "quality_gate.max_regression"),
        ({"thresholds": {}, "max_regression": {}}, "quality_gate.max_regression"),
        ({"thresholds": {}, "max_regression": 0.5}, "quality_gate.max_regression"),
        # lower_is_better for a metric nothing checks
        ({"thresholds": {"accuracy": 0.9}, "lower_is_better": ["loss"]}, "quality_gate.lower_is_better"),
        ({"max_regression": {"acc": 0.1}, "lower_is_better": ["los"]}, "quality_gate.lower_is_better"),
        ({"thresholds": {"loss": 0.5}, "lower_is_better": "loss"}, "quality_gate.lower_is_better"),
        ({"thresholds": {"loss": 0.5}, "lower_is_better": [1]}, "quality_gate.lower_is_better"),
        # numbers that are not finite numbers
        ({"thresholds": {"accuracy": math.nan}}, "quality_gate.thresholds.accuracy"),
        ({"thresholds": {"accuracy": math.inf}}, "quality_gate.thresholds.accuracy"),
        ({"thresholds": {"accuracy": True}}, "quality_gate.thresholds.accuracy"),
        ({"thresholds": {"accuracy": 10**400}}, "quality_gate.thresholds.accuracy"),
        ({"thresholds": {"accuracy": -(10**400)}}, "quality_gate.thresholds.accuracy"),
        ({"thresholds": {"accuracy": 0.9}, "max_regression": 10**400}, "quality_gate.max_regression"),
        ({"thresholds": {"a": 0.9}, "max_regression": math.nan}, "quality_gate.max_regression"),
        ({"max_regression": {"a": False}}, "quality_gate.max_regression.a"),
        ({"max_regression": {"a": -0.1}}, "quality_gate.max_regression.a"),
        # keys that are not metric names (1 and "1" must not merge into one metric)
        ({"thresholds": {1: 0.9, "1": 0.5}}, "quality_gate.thresholds"),
        ({"thresholds": {None: 0.9}}, "quality_gate.thresholds"),
        ({"thresholds": {"": 0.9}}, "quality_gate.thresholds"),
        ({"thresholds": {"x" * 1000: 0.9}}, "quality_gate.thresholds"),
        ({"max_regression": {(1, 2): 0.1}}, "quality_gate.max_regression"),
        ({"thresholds": [("accuracy", 0.9)]}, "quality_gate.thresholds"),
        ({1: 2, "thresholds": {"a": 1}}, "quality_gate"),
        ({"thresholds": {"a": 1}, "on_failure": ["fail"]}, "quality_gate.on_failure"),
    ],
)
def test_options_that_would_check_less_than_they_say_are_refused(options, field) -> None:
    with pytest.raises(SpecError) as err:
        QualityGate.from_dict(options)
    assert err.value.field == field, str(err.value)


def test_the_issue_example_is_refused_not_blessed() -> None:
    with pytest.raises(SpecError) as err:
        QualityGate.from_dict({"max_regression": 0.01}).evaluate({"accuracy": 0.1}, {"accuracy": 0.99}, 3)
    assert err.value.field == "quality_gate.max_regression"
    assert "thresholds" in str(err.value)
    # named per metric, the same bound checks and refuses the regression
    verdict = QualityGate.from_dict({"max_regression": {"accuracy": 0.01}}).evaluate(
        {"accuracy": 0.1}, {"accuracy": 0.99}, 3
    )
    assert not verdict.blessed
    assert verdict.failures == (
        "accuracy 0.1 regressed by 0.89 against 0.99 of serving version 3 (tolerance 0.01)",
    )


REGRESSION_ONLY = QualityGate.from_dict({"max_regression": {"accuracy": 0.01}})


@pytest.mark.parametrize(
    ("metrics", "baseline", "needle"),
    [
        # the training never reports the metric the bound names
        ({"acc": 0.99}, {"accuracy": 0.9}, "accuracy: missing or not a number in the candidate's metrics"),
        ({}, {"accuracy": 0.9}, "accuracy: missing"),
        (None, {"accuracy": 0.9}, "accuracy: missing"),
        ({"accuracy": math.nan}, {"accuracy": 0.9}, "accuracy: missing or not a number"),
        ({"accuracy": math.inf}, {"accuracy": 0.9}, "accuracy: missing or not a number"),
        ({"accuracy": True}, {"accuracy": 0.9}, "accuracy: missing or not a number"),
        ({"accuracy": 10**400}, {"accuracy": 0.9}, "accuracy: missing or not a number"),
        ({"accuracy": "0.99"}, {"accuracy": 0.9}, "accuracy: missing or not a number"),
        ([("accuracy", 0.99)], {"accuracy": 0.9}, "not a mapping"),
        # a version serves, but its value to compare with is not there
        ({"accuracy": 0.99}, None, "serving version 3 has no recorded value"),
        ({"accuracy": 0.99}, {}, "serving version 3 has no recorded value"),
        ({"accuracy": 0.99}, {"acc": 0.9}, "serving version 3 has no recorded value"),
        ({"accuracy": 0.99}, {"accuracy": math.nan}, "serving version 3 has no recorded value"),
        ({"accuracy": 0.99}, {"accuracy": 10**400}, "serving version 3 has no recorded value"),
        ({"accuracy": 0.99, 1: 2}, {"accuracy": None, 2: 1}, "serving version 3 has no recorded value"),
    ],
)
def test_a_bound_that_cannot_be_checked_is_a_failure(metrics, baseline, needle) -> None:
    verdict = REGRESSION_ONLY.evaluate(metrics, baseline, 3)
    assert not verdict.blessed, verdict
    assert any(needle in f for f in verdict.failures), verdict.failures


def test_thresholds_with_odd_candidate_values_fail_without_crashing() -> None:
    gate = QualityGate.from_dict({"thresholds": {"accuracy": 0.9}})
    for value in (10**400, -(10**400), math.nan, "1", None, True, [1]):
        verdict = gate.evaluate({"accuracy": value, 5: 1}, None, None)
        assert not verdict.blessed and "accuracy: missing or not a number" in verdict.failures[0]


def test_the_first_publish_has_nothing_to_regress_against_and_says_so() -> None:
    verdict = REGRESSION_ONLY.evaluate({"accuracy": 0.5}, None, None)
    assert verdict.blessed
    assert verdict.checks == ("no version serves: nothing to regress against",)
    # yet the candidate must still report the metric the bound names
    assert not REGRESSION_ONLY.evaluate({"loss": 0.5}, None, 3).blessed


def test_valid_gates_still_bless_what_passes() -> None:
    gate = QualityGate.from_dict(
        {"thresholds": {"accuracy": 0.9}, "max_regression": 0.01, "lower_is_better": [], "on_failure": "skip"}
    )
    ok = gate.evaluate({"accuracy": 0.95}, {"accuracy": 0.955}, 2)
    assert ok.blessed and ok.checks == (
        "accuracy 0.95 >= 0.9",
        "accuracy 0.95 vs 0.955 of version 2 (tolerance 0.01)",
    )
    loss = QualityGate.from_dict({"max_regression": {"loss": 0.1}, "lower_is_better": ["loss"]})
    assert loss.evaluate({"loss": 0.3}, {"loss": 0.25}, 1).blessed
    assert not loss.evaluate({"loss": 0.4}, {"loss": 0.25}, 1).blessed


def test_publish_compares_with_the_serving_versions_exported_metrics_when_none_were_recorded() -> None:
    from airflow_tfk.serving.base import NotBlessed
    from tests.serving.test_publish import make, model, run

    gate = QualityGate.from_dict({"max_regression": {"accuracy": 0.01}})
    target = make({1: "ok", 2: "ok", 3: "ok"})
    run(target, 1)  # published without a gate and without metrics: nothing recorded
    assert target.recorded == {}
    target.exported_metrics = {1: {"accuracy": 0.99}}
    with pytest.raises(NotBlessed) as refused:
        run(target, 2, gate=gate, metrics={"accuracy": 0.1})
    assert "regressed by 0.89 against 0.99 of serving version 1" in str(refused.value)
    target.exported_metrics = {}
    with pytest.raises(NotBlessed) as unknown:
        run(target, 3, gate=gate, metrics={"accuracy": 0.995})
    assert "serving version 1 has no recorded value" in str(unknown.value)
    assert model(target).stable == 1


@pytest.mark.parametrize("breaker", ["\n", "\r", "\x1b[2K", "\u2028", "\x85"])
def test_the_candidate_s_metric_names_cannot_add_lines_to_the_verdict(breaker: str) -> None:
    gate = QualityGate.from_dict({"thresholds": {"accuracy": 0.9}})
    forged = f"a{breaker}INFO - quality gate on m version 2: accuracy 0.99 >= 0.9"
    verdict = gate.evaluate({forged: 1}, {forged: 1}, 1)
    assert not verdict.blessed
    assert verdict.summary().isprintable(), verdict.summary()
