"""The gate's own evaluation, without a server: options refused naming the field, the data
formats read as data with their bounds, and each metric against scikit-learn's."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest
from sklearn import metrics as sk

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.evaluation import (
    Evaluation,
    EvaluationError,
    compute,
    differences,
    read_rows,
    requests,
)
from airflow_tfk.serving.gate import QualityGate


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({}, "quality_gate.evaluate.data"),
        ({"data": "/etc/passwd.csv"}, "quality_gate.evaluate.data"),
        ({"data": "../other/eval.csv"}, "quality_gate.evaluate.data"),
        ({"data": "eval/../../x.csv"}, "quality_gate.evaluate.data"),
        ({"data": "eval/data.parquet"}, "quality_gate.evaluate.data"),
        ({"data": "e.csv", "metrics": "accuracy"}, "quality_gate.evaluate.metrics"),
        ({"data": "e.csv", "metrics": ["accuracy", "f1"]}, "quality_gate.evaluate.metrics"),
        ({"data": "e.csv", "max_rows": 0}, "quality_gate.evaluate.max_rows"),
        ({"data": "e.csv", "max_rows": True}, "quality_gate.evaluate.max_rows"),
        ({"data": "e.csv", "batch_size": 10**6}, "quality_gate.evaluate.batch_size"),
        ({"data": "e.csv", "max_difference": float("nan")}, "quality_gate.evaluate.max_difference"),
        ({"data": "e.csv", "label": ""}, "quality_gate.evaluate.label"),
        ({"data": "e.csv", "script": "import os"}, "quality_gate.evaluate.script"),
    ],
)
def test_bad_options_are_refused_naming_the_field(options, field) -> None:
    with pytest.raises(SpecError) as err:
        QualityGate.from_dict({"thresholds": {"accuracy": 0.9}, "evaluate": options})
    assert err.value.field == field, err.value


def test_the_gate_takes_evaluate_and_cleans_the_path() -> None:
    gate = QualityGate.from_dict({"thresholds": {"accuracy": 0.9}, "evaluate": {"data": "./eval//d.csv"}})
    assert isinstance(gate.evaluation, Evaluation)
    assert gate.evaluation.data == "eval/d.csv"
    assert gate.evaluation.metrics == ("accuracy",)


CSV = b"a,label,b\n1,0,2\n3,1,4\n5,1,6\n"


def test_csv_rows_are_every_column_but_the_label_in_order() -> None:
    ev = Evaluation("e.csv")
    assert read_rows(ev, CSV) == ([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [0.0, 1.0, 1.0])
    assert read_rows(Evaluation("e.csv", max_rows=2), CSV)[1] == [0.0, 1.0]


def test_jsonl_and_npz_give_the_same_rows() -> None:
    ev = Evaluation("e.jsonl")
    lines = b"\n".join(json.dumps({"x": r, "label": y}).encode() for r, y in (([1, 2], 0), ([3, 4], 1)))
    assert read_rows(ev, lines) == ([[1.0, 2.0], [3.0, 4.0]], [0.0, 1.0])
    buf = io.BytesIO()
    np.savez(buf, x=np.array([[1, 2], [3, 4]], dtype="float32"), label=np.array([0, 1]))
    assert read_rows(Evaluation("e.npz"), buf.getvalue()) == ([[1.0, 2.0], [3.0, 4.0]], [0.0, 1.0])


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("e.csv", b"a,b\n1,2\n", "no 'label' column"),
        ("e.csv", b"a,label\n1,zero\n", "line 2, label: 'zero' is not a number"),
        ("e.csv", b"a,label\n1,nan\n", "not a finite number"),
        ("e.csv", b"a,label\n1,0,9\n", "line 2 has 3 columns"),
        ("e.csv", b"a,b,label\n1,2,0\n", None),  # fine
        ("e.csv", b"a,label\n", "holds no rows"),
        ("e.csv", b"\xff\xfe", "not UTF-8"),
        ("e.jsonl", b'{"x": [1], "label": 0}\n{"x": [1, 2], "label": 1}\n', "row 2 has 2 features"),
        ("e.jsonl", b"not json\n", "line 1 is not JSON"),
        ("e.jsonl", b'{"label": 0}\n', "needs the keys 'x' and 'label'"),
        ("e.npz", b"PK\x03\x04 not really", "is not a readable .npz file"),
    ],
)
def test_bad_data_says_where(name, data, says) -> None:
    ev = Evaluation(name)
    if says is None:
        read_rows(ev, data)
        return
    with pytest.raises(EvaluationError, match=says):
        read_rows(ev, data)


def test_an_npz_with_pickled_objects_is_refused_not_loaded() -> None:
    buf = io.BytesIO()
    np.savez(buf, x=np.array([object()], dtype=object), label=np.array([0]))
    with pytest.raises(EvaluationError, match="not a readable .npz"):
        read_rows(Evaluation("e.npz"), buf.getvalue())


def test_requests_batch_the_rows_plain_or_named() -> None:
    rows = [[float(i)] for i in range(5)]
    plain = requests(Evaluation("e.csv", batch_size=2), rows)
    assert [len(b["instances"]) for b in plain] == [2, 2, 1] and plain[0]["instances"][0] == [0.0]
    named = requests(Evaluation("e.csv", input="pixels"), rows)
    assert named[0]["instances"][0] == {"pixels": [0.0]}


def _binary(n: int = 400, seed: int = 3):
    rnd = random.Random(seed)
    labels = [float(rnd.random() < 0.4) for _ in range(n)]
    scores = [min(1.0, max(0.0, 0.35 * y + rnd.random() * 0.7)) for y in labels]
    return labels, scores


def test_binary_metrics_agree_with_scikit_learn() -> None:
    labels, scores = _binary()
    ev = Evaluation("e.csv", metrics=("accuracy", "loss", "auc", "precision", "recall"))
    got = compute(ev, [[s] for s in scores], labels)
    hard = [float(s >= 0.5) for s in scores]
    assert got["accuracy"] == pytest.approx(sk.accuracy_score(labels, hard), abs=1e-6)
    assert got["auc"] == pytest.approx(sk.roc_auc_score(labels, scores), abs=1e-6)
    assert got["precision"] == pytest.approx(sk.precision_score(labels, hard), abs=1e-6)
    assert got["recall"] == pytest.approx(sk.recall_score(labels, hard), abs=1e-6)
    clipped = np.clip(scores, 1e-7, 1 - 1e-7)
    assert got["loss"] == pytest.approx(sk.log_loss(labels, clipped), abs=1e-5)


def test_class_probabilities_from_a_named_output() -> None:
    rnd = random.Random(5)
    labels = [float(rnd.randrange(3)) for _ in range(200)]
    probs = []
    for _ in labels:
        raw = [rnd.random() + 1e-3 for _ in range(3)]
        probs.append([v / sum(raw) for v in raw])
    answers = [{"probabilities": p, "classes": 0} for p in probs]  # as the digits app answers
    got = compute(Evaluation("e.csv", metrics=("accuracy", "loss")), answers, labels)
    assert got["accuracy"] == pytest.approx(sk.accuracy_score(labels, np.argmax(probs, axis=1)), abs=1e-6)
    assert got["loss"] == pytest.approx(sk.log_loss(labels, probs, labels=[0, 1, 2]), abs=1e-5)


def test_regression_metrics() -> None:
    got = compute(Evaluation("e.csv", metrics=("mse", "mae")), [[1.0], [2.0], [4.0]], [1.0, 3.0, 1.0])
    assert got == {"mse": pytest.approx((0 + 1 + 9) / 3, abs=1e-6), "mae": pytest.approx(4 / 3, abs=1e-6)}


@pytest.mark.parametrize(
    ("answers", "says"),
    [
        ([{"a": [0.5], "b": [0.5]}], "several outputs"),
        ([{"logits": [1.0]}], None),  # one output: it is the score
        ([["x"]], "not a number"),
        ([[0.5], [0.5]], "1 rows sent, 2 predictions received"),
    ],
)
def test_answers_that_cannot_be_scored_say_why(answers, says) -> None:
    ev = Evaluation("e.csv")
    if says is None:
        assert compute(ev, answers, [1.0]) == {"accuracy": 1.0}
        return
    with pytest.raises(EvaluationError, match=says):
        compute(ev, answers, [1.0])


def test_a_label_that_is_no_class_of_the_output_is_an_error() -> None:
    with pytest.raises(EvaluationError, match="label 7 is not a class"):
        compute(Evaluation("e.csv", metrics=("loss",)), [[0.5, 0.5]], [7.0])


def test_differences_name_the_claim_and_the_measurement() -> None:
    ev = Evaluation("e.csv", max_difference=0.05)
    said = differences(ev, {"accuracy": 0.1, "loss": 2.3}, {"accuracy": 1.0, "loss": 2.31, "note": "x"})
    assert said == ["accuracy: the training reported 1, measured 0.1"]
