"""The evaluator role beside a real parameter_server training: it evaluates each new
checkpoint on held-out data, writes TensorBoard scalars and a metrics file, and stops
by itself once the last step is evaluated."""

import json
import sys

import pytest

from airflow_tfk.runtime import app as app_mod
from airflow_tfk.runtime.evaluator import EVAL_METRICS_FILE, numeric
from airflow_tfk.runtime.examples.digits_app import ACCURACY_THRESHOLD, DigitsApp
from airflow_tfk.runtime.progress import parse_event

APP = [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"]


def test_numeric_keeps_finite_numbers_only():
    assert numeric({"a": 1, "b": 0.5, "c": "x", "d": True, "e": float("nan"), "f": None}) == {
        "a": 1.0,
        "b": 0.5,
    }


def test_between_graph_evaluator_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", "")  # an in-process run of another test may have set it
    monkeypatch.setenv("TFK_CLUSTER", json.dumps({"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}))
    monkeypatch.setenv("TFK_ROLE", "evaluator")
    monkeypatch.setenv("TFK_INDEX", "0")
    monkeypatch.setenv("TFK_MODE", "between_graph")
    assert DigitsApp().run(["--tfk_checkpoint_dir", "/nonexistent"]) == app_mod.EXIT_USAGE
    assert "TF1 Saver" in capsys.readouterr().err


@pytest.mark.e2e
def test_sidecar_evaluator_follows_the_checkpoints_and_stops(local_cluster, tmp_path):
    import tensorflow as tf

    steps, every = 300, 100
    logs, models = tmp_path / "logs", tmp_path / "models"
    c = local_cluster(
        {"chief": 1, "ps": 1, "worker": 1, "evaluator": 1},
        lambda role, i: [*APP, "--tfk_steps", str(steps), "--tfk_checkpoint_every", str(every)],
        mode="parameter_server",
        env={"TFK_MODEL_DIR": str(models), "TFK_LOG_DIR": str(logs)},
    )
    c.start_all()
    assert c.wait("chief", 0, timeout=240) == 0, c.describe()
    assert c.wait("evaluator", 0, timeout=60) == 0, c.describe()  # stopped by itself
    events = [
        e
        for e in map(lambda line: parse_event(line, "eval_metrics"), c.stdout("evaluator", 0).splitlines())
        if e
    ]
    evaluated = [e["step"] for e in events]
    assert evaluated == sorted(set(evaluated)) and evaluated[-1] == steps, evaluated
    assert events[-1]["accuracy"] >= ACCURACY_THRESHOLD - 0.05, events[-1]
    # the metrics file next to the checkpoints: the newest metrics and their history
    saved = json.loads((models / ".checkpoints" / "test" / EVAL_METRICS_FILE).read_text())
    assert saved["step"] == steps and saved["metrics"]["accuracy"] == events[-1]["accuracy"]
    assert [h["step"] for h in saved["history"]] == evaluated
    # TensorBoard: one scalar per metric and checkpoint, in the evaluator's own run
    files = list((logs / "test" / "evaluator-0").glob("events.out.tfevents.*"))
    assert files, list(logs.rglob("*"))
    scalars = {}
    for f in files:
        for event in tf.compat.v1.train.summary_iterator(str(f)):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(event.step)
    assert scalars["eval/accuracy"] == evaluated and scalars["eval/loss"] == evaluated
