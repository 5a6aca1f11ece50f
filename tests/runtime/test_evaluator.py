"""The evaluator role beside a real parameter_server training: it evaluates each new
checkpoint on held-out data, writes TensorBoard scalars and a metrics file, and stops
by itself once the last step is evaluated."""

import json
import re
import sys
import time

import pytest

from airflow_tfk.runtime.evaluator import EVAL_METRICS_FILE, numeric, tf1_keys
from airflow_tfk.runtime.examples.digits_app import ACCURACY_THRESHOLD
from airflow_tfk.runtime.exits import UsageError
from airflow_tfk.runtime.progress import parse_event

APP = [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"]


def test_numeric_keeps_finite_numbers_only():
    assert numeric({"a": 1, "b": 0.5, "c": "x", "d": True, "e": float("nan"), "f": None}) == {
        "a": 1.0,
        "b": 0.5,
    }


class _Weight:
    """What tf1_keys reads of a Keras weight: its variable path and shape."""

    def __init__(self, path, shape):
        self.path, self.shape = path, shape


class _Model:
    def __init__(self, *weights):
        self.weights = list(weights)


CKPT_SHAPES = {
    "global_step": [],
    "sequential/dense/kernel": [64, 64],
    "sequential/dense/kernel/Adam": [64, 64],
    "sequential/dense/bias": [64],
    "sequential/logits/kernel": [64, 10],
}


def test_tf1_keys_match_the_model_weights_by_name():
    model = _Model(_Weight("sequential/dense/kernel", (64, 64)), _Weight("sequential/dense/bias", (64,)))
    assert tf1_keys(model, CKPT_SHAPES) == ["sequential/dense/kernel", "sequential/dense/bias"]
    # a second model in the process is `sequential_1`: found below the model's name
    renamed = _Model(_Weight("sequential_1/logits/kernel", (64, 10)))
    assert tf1_keys(renamed, CKPT_SHAPES) == ["sequential/logits/kernel"]


@pytest.mark.parametrize(
    ("weight", "shapes"),
    [
        (_Weight("sequential/other/kernel", (3,)), CKPT_SHAPES),  # not in the checkpoint
        (_Weight("sequential/dense/kernel", (64, 65)), CKPT_SHAPES),  # another shape
        (_Weight("m/dense/kernel", (2,)), {"a/dense/kernel": [2], "b/dense/kernel": [2]}),  # two
    ],
)
def test_tf1_keys_name_the_weight_they_cannot_find(weight, shapes):
    with pytest.raises(UsageError, match=re.escape(repr(weight.path))):
        tf1_keys(_Model(weight), shapes)


def _eval_events(stdout):
    return [e for e in (parse_event(line, "eval_metrics") for line in stdout.splitlines()) if e]


def _scalar_steps(run_dir):
    import tensorflow as tf

    files = list(run_dir.glob("events.out.tfevents.*"))
    assert files, list(run_dir.parent.rglob("*"))
    scalars = {}
    for f in files:
        for event in tf.compat.v1.train.summary_iterator(str(f)):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append(event.step)
    return scalars


@pytest.mark.e2e
def test_the_evaluator_reads_between_graph_tf1_checkpoints(local_cluster, tmp_path):
    """between_graph: the chief's MonitoredTrainingSession writes TF1 Saver checkpoints
    (to the ps's files); the evaluator restores each into its local model by name,
    evaluates it and stops after the last step's. The chief's loss summaries are written
    too (the TF1 graph is finalized, so they cannot be summary ops)."""
    steps, every = 1200, 300  # long enough to outlast a few of the evaluator's 2 s polls
    logs, models = tmp_path / "logs", tmp_path / "models"
    c = local_cluster(
        {"ps": 1, "worker": 2, "evaluator": 1},
        lambda role, i: [*APP, "--tfk_steps", str(steps), "--tfk_checkpoint_every", str(every)],
        mode="between_graph",
        env={"TFK_MODEL_DIR": str(models), "TFK_LOG_DIR": str(logs)},
    )
    # The evaluator watches before the workers start: 200 steps take a few seconds, less
    # than TensorFlow's import, so a late evaluator would only ever see the last checkpoint.
    c.start_all(("ps", "evaluator"))
    deadline = time.monotonic() + 120
    while "evaluator: watching" not in c.stdout("evaluator", 0) + c.stderr("evaluator", 0):
        assert time.monotonic() < deadline and c.procs[("evaluator", 0)].poll() is None, c.describe()
        time.sleep(0.2)
    c.start_all(("worker",))
    for i in range(2):
        assert c.wait("worker", i, timeout=240) == 0, c.describe()
    assert c.wait("evaluator", 0, timeout=60) == 0, c.describe()  # stopped by itself
    events = _eval_events(c.stdout("evaluator", 0))
    evaluated = [e["step"] for e in events]
    # asynchronous replicas may overshoot the last step by a few updates
    assert evaluated == sorted(set(evaluated)) and evaluated[-1] >= steps, evaluated
    assert len(evaluated) >= 2, evaluated  # a checkpoint during training, and the last
    assert events[-1]["accuracy"] >= ACCURACY_THRESHOLD - 0.1, events[-1]
    # the first checkpoint (step 0, untrained) scores worse than the last one
    assert events[0]["loss"] > events[-1]["loss"], events
    saved = json.loads((models / ".checkpoints" / "test" / EVAL_METRICS_FILE).read_text())
    assert saved["step"] == evaluated[-1] and [h["step"] for h in saved["history"]] == evaluated
    scalars = _scalar_steps(logs / "test" / "evaluator-0")
    assert scalars["eval/accuracy"] == evaluated and scalars["eval/loss"] == evaluated
    assert _scalar_steps(logs / "test" / "worker-0")["loss"], "the chief's loss summaries"


@pytest.mark.e2e
def test_sidecar_evaluator_follows_the_checkpoints_and_stops(local_cluster, tmp_path):

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
    events = _eval_events(c.stdout("evaluator", 0))
    evaluated = [e["step"] for e in events]
    assert evaluated == sorted(set(evaluated)) and evaluated[-1] == steps, evaluated
    assert events[-1]["accuracy"] >= ACCURACY_THRESHOLD - 0.05, events[-1]
    # the metrics file next to the checkpoints: the newest metrics and their history
    saved = json.loads((models / ".checkpoints" / "test" / EVAL_METRICS_FILE).read_text())
    assert saved["step"] == steps and saved["metrics"]["accuracy"] == events[-1]["accuracy"]
    assert [h["step"] for h in saved["history"]] == evaluated
    # TensorBoard: one scalar per metric and checkpoint, in the evaluator's own run
    scalars = _scalar_steps(logs / "test" / "evaluator-0")
    assert scalars["eval/accuracy"] == evaluated and scalars["eval/loss"] == evaluated
