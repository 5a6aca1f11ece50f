"""Independent evaluation on the local backend, with a real model server: the gate measures
the candidate on held-out rows through the server and refuses a model that claims
``accuracy: 1.0`` while it is no better than chance, naming both numbers; nothing of it is
left loaded, and the honest version keeps serving."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_tfk.serving.base import NotBlessed, ServingError
from airflow_tfk.serving.gate import QualityGate
from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.publish import candidate_name, publish
from airflow_tfk.serving.spec import ServingSpec

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
GATE = {
    "thresholds": {"accuracy": 0.8},
    "max_regression": {"accuracy": 0.02},
    "evaluate": {"data": "eval/digits.csv", "metrics": ["accuracy", "loss"]},
}


@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfk-eval")
    store = root / "default" / ".claims" / "models"
    store.mkdir(parents=True)
    build = subprocess.Popen(
        [sys.executable, "-m", "tests.serving.models", "classifiers", str(store)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    spec = ServingSpec(model_name="digits", claim="models", name="tfs-digits-eval", load_timeout_seconds=120)
    target = LocalServing(spec, root=str(root), server="stand-in")
    try:
        target.ensure(print)  # the server imports TensorFlow while the models are built
        _, err = build.communicate(timeout=300)
        assert build.returncode == 0, err[-2000:]
        yield target
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
        target.delete(print)
    assert not target.running()


def _accuracy(lines: list[str], prefix: str) -> float:
    (line,) = [x for x in lines if x.startswith(prefix)]
    return float(re.search(r"accuracy ([0-9.e-]+)", line).group(1))


def test_a_model_that_claims_1_0_at_chance_is_refused_by_the_gates_own_evaluation(serving):
    gate = QualityGate.from_dict(GATE)
    first: list[str] = []
    publish(serving, 1, gate=gate, emit=first.append)
    honest = _accuracy(first, "independent evaluation of digits version 1")
    assert honest >= 0.8, first
    assert serving.label_version("stable") == 1
    # recorded as the version's metrics: the measured ones, the training's beside them
    recorded = serving.published_metrics()[1]
    assert recorded["accuracy"] == honest and recorded["reported_accuracy"] == 0.9, recorded

    lines: list[str] = []
    with pytest.raises(NotBlessed) as caught:
        publish(serving, 2, gate=gate, emit=lines.append)
    measured = _accuracy(lines, "independent evaluation of digits version 2")
    assert measured < 0.2, lines  # ten classes: chance
    message = str(caught.value)
    # both numbers: the one measured, the one the training reported
    assert f"accuracy {measured:g} fails the threshold >= 0.8" in message, message
    assert "the training reported accuracy 1.0" in message, message
    assert f"regressed by {honest - measured:.4g} against {honest:g} of serving version 1" in message
    assert "on eval/digits.csv" in message and "version 1" in message
    assert any("the training's own metrics of digits version 2" in x and "not judged" in x for x in lines)
    assert any(x.startswith("warning: accuracy: the training reported 1, measured") for x in lines), lines
    # nothing of the candidate is left; the honest version serves and answers
    config = serving.read_config()
    assert config is not None and config.get(candidate_name("digits")) is None
    assert serving.label_version("stable") == 1
    body = {"instances": [[0.0] * 64]}
    assert serving.predict(body, label="stable")["predictions"]


def test_evaluation_data_that_cannot_be_read_fails_before_anything_is_loaded(serving):
    for data, why in (
        ("eval/missing.csv", "cannot read eval/missing.csv"),
        ("digits/1/saved_model.csv", "cannot read"),
    ):
        gate = QualityGate.from_dict({**GATE, "evaluate": {"data": data}})
        before = serving.read_config()
        with pytest.raises(ServingError, match=why):
            publish(serving, 1, gate=gate, emit=print)
        assert serving.read_config() == before  # nothing written, nothing loaded


def test_the_trainings_own_metrics_of_any_shape_are_shown_not_trusted(serving):
    """Metrics from an upstream task's XCom are the training's data: a list, odd keys or a
    huge text neither break the publish nor count."""
    gate = QualityGate.from_dict(GATE)
    if serving.label_version("stable") != 1:  # run on its own
        publish(serving, 1, gate=gate, emit=print)
    for odd in ([1.0, "accuracy"], {1: "x", "accuracy": "1.0", "note": "y" * 10_000}):
        lines: list[str] = []
        with pytest.raises(NotBlessed, match="accuracy 0.09"):
            publish(serving, 2, gate=gate, metrics=odd, emit=lines.append)  # type: ignore[arg-type]
        (own,) = [x for x in lines if x.startswith("the training's own metrics")]
        assert len(own) < 700, own
    assert serving.label_version("stable") == 1
