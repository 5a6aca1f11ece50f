"""Independent evaluation: the quality gate judges metrics it measured itself, not the ones
the training wrote about its own model.

``quality_gate.evaluate`` names an evaluation data set in the model store (a path under the
claim, or the local base path, beside the models' folders) and the metrics to compute. The
publish reads and checks the data before anything is created, then, once the candidate is
loaded under its candidate name (which no client calls), sends every row to it and to the
serving version through the model server's own predict API, the way clients will, and
computes both versions' metrics on the same rows. The gate's thresholds and
``max_regression`` then judge those numbers; the training's self-reported metrics are shown
beside them, and a difference over ``max_difference`` is a warning in the log.

Why through the server rather than a job that loads the SavedModel: what is judged is what
clients will get (the serving signature, the server's TensorFlow and its batching), the
provider needs no TensorFlow, and the same code serves both backends.

Data formats (by the file's suffix), read as data, never run: ``.csv`` (a header row; the
``label`` column, every other column a feature, in order), ``.jsonl`` (one object per line:
``{"<input or 'x'>": [features...], "<label>": value}``) and ``.npz`` (arrays ``x`` and the
label key; needs NumPy where the publish runs, and no pickled objects). Bounded: at most
:data:`MAX_DATA_BYTES` read and ``max_rows`` rows used. Pure, apart from NumPy's parser.
"""

from __future__ import annotations

import csv
import io
import json
import math
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from airflow_tfk.core.errors import SpecError

WHERE = "quality_gate.evaluate"
FORMATS = (".csv", ".jsonl", ".npz")
#: what the gate can measure; ``loss`` is the cross-entropy of the class probabilities (the
#: binary one for a single score), ``auc``/``precision``/``recall`` take class 1 as positive
METRICS = ("accuracy", "loss", "auc", "precision", "recall", "mse", "mae")
#: the most of a data file a publish reads
MAX_DATA_BYTES = 64 * 2**20
MAX_ROWS = 100_000
#: probabilities are clipped to this before a logarithm (as Keras does)
EPSILON = 1e-7


class EvaluationError(ValueError):
    """The evaluation data or the model's answers cannot be evaluated; says why."""


@dataclass(frozen=True)
class Evaluation:
    """:param data: the evaluation data set: a path inside the model store (relative, no
        ``..``), ``.csv``, ``.jsonl`` or ``.npz``.
    :param label: the label's column (CSV), key (JSON Lines) or array (NumPy).
    :param metrics: what to measure: ``accuracy``, ``loss``, ``auc``, ``precision``,
        ``recall``, ``mse``, ``mae``.
    :param output: the model's output holding class probabilities or a score (default:
        ``probabilities`` when the model has it, else its only output).
    :param input: the model's input name, when the rows must be sent as ``{input: row}``
        (default: plain rows, for a model with one input).
    :param max_rows: rows used at most (the first ones).
    :param batch_size: rows per predict request.
    :param max_difference: a measured metric further than this from the one the training
        reported is a warning in the log.
    """

    data: str
    label: str = "label"
    metrics: tuple[str, ...] = ("accuracy",)
    output: str | None = None
    input: str | None = None
    max_rows: int = 5000
    batch_size: int = 256
    max_difference: float = 0.05

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", _data_path(self.data))
        for name in ("label", "output", "input"):
            value = getattr(self, name)
            if value is None and name != "label":
                continue
            if not isinstance(value, str) or not value or len(value) > 200:
                raise SpecError(f"{WHERE}.{name}", "must be a non-empty name", value)
        metrics = self.metrics
        if isinstance(metrics, str) or not isinstance(metrics, Sequence) or not metrics:
            raise SpecError(f"{WHERE}.metrics", f"must be a list of: {', '.join(METRICS)}", metrics)
        for m in metrics:
            if m not in METRICS:
                raise SpecError(f"{WHERE}.metrics", f"must be a list of: {', '.join(METRICS)}", m)
        object.__setattr__(self, "metrics", tuple(dict.fromkeys(metrics)))
        for name, top in (("max_rows", MAX_ROWS), ("batch_size", 10_000)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise SpecError(f"{WHERE}.{name}", f"must be an integer from 1 to {top}", value)
        diff = self.max_difference
        if isinstance(diff, bool) or not isinstance(diff, int | float) or not math.isfinite(diff) or diff < 0:
            raise SpecError(f"{WHERE}.max_difference", "must be a finite number >= 0", diff)

    @classmethod
    def from_dict(cls, data: Any) -> Evaluation:
        if not isinstance(data, Mapping):
            raise SpecError(WHERE, "must be a mapping (data, label, metrics, ...)", data)
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                options = ", ".join(sorted(known))
                raise SpecError(f"{WHERE}.{str(key)[:100]}", f"is not an option (options: {options})", key)
        if "data" not in data:
            raise SpecError(f"{WHERE}.data", "is required")
        return cls(**dict(data))


def _data_path(data: Any) -> str:
    if not isinstance(data, str) or not data.strip() or len(data) > 1024:
        raise SpecError(f"{WHERE}.data", "must be a path inside the model store", data)
    clean = posixpath.normpath(data)
    if data.startswith("/") or clean == ".." or clean.startswith("../") or "\x00" in data:
        raise SpecError(f"{WHERE}.data", "must be a relative path inside the model store (no '..')", data)
    if not clean.endswith(FORMATS):
        raise SpecError(f"{WHERE}.data", f"must end with one of {', '.join(FORMATS)}", data)
    return clean


# -- the data -------------------------------------------------------------------------------
def read_rows(ev: Evaluation, data: bytes) -> tuple[list[list[float]], list[float]]:
    """(feature rows, labels) of the data file's bytes, at most ``ev.max_rows``."""
    if len(data) > MAX_DATA_BYTES:
        raise EvaluationError(f"{ev.data} holds more than {MAX_DATA_BYTES} bytes")
    if ev.data.endswith(".csv"):
        rows, labels = _csv(ev, data)
    elif ev.data.endswith(".jsonl"):
        rows, labels = _jsonl(ev, data)
    else:
        rows, labels = _npz(ev, data)
    if not rows:
        raise EvaluationError(f"{ev.data} holds no rows")
    width = len(rows[0])
    for i, row in enumerate(rows):
        if len(row) != width:
            raise EvaluationError(f"{ev.data}: row {i + 1} has {len(row)} features, the first has {width}")
    return rows, labels


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise EvaluationError(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise EvaluationError(f"{where}: {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(number):
        raise EvaluationError(f"{where}: {value!r} is not a finite number")
    return number


def _csv(ev: Evaluation, data: bytes) -> tuple[list[list[float]], list[float]]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EvaluationError(f"{ev.data} is not UTF-8 text: {exc}") from None
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header or ev.label not in header:
        raise EvaluationError(f"{ev.data}: the header has no {ev.label!r} column (label)")
    at = header.index(ev.label)
    rows: list[list[float]] = []
    labels: list[float] = []
    for n, line in enumerate(reader, start=2):
        if not line:
            continue
        if len(rows) >= ev.max_rows:
            break
        if len(line) != len(header):
            raise EvaluationError(f"{ev.data}: line {n} has {len(line)} columns, the header {len(header)}")
        labels.append(_number(line[at], f"{ev.data} line {n}, {ev.label}"))
        rows.append([_number(v, f"{ev.data} line {n}") for i, v in enumerate(line) if i != at])
    return rows, labels


def _jsonl(ev: Evaluation, data: bytes) -> tuple[list[list[float]], list[float]]:
    key = ev.input or "x"
    rows: list[list[float]] = []
    labels: list[float] = []
    for n, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        if len(rows) >= ev.max_rows:
            break
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            raise EvaluationError(f"{ev.data} line {n} is not JSON") from None
        if not isinstance(item, dict) or key not in item or ev.label not in item:
            raise EvaluationError(f"{ev.data} line {n}: needs the keys {key!r} and {ev.label!r}")
        features = item[key]
        if not isinstance(features, list):
            features = [features]
        rows.append([_number(v, f"{ev.data} line {n}, {key}") for v in features])
        labels.append(_number(item[ev.label], f"{ev.data} line {n}, {ev.label}"))
    return rows, labels


def _npz(ev: Evaluation, data: bytes) -> tuple[list[list[float]], list[float]]:
    try:
        import numpy as np
    except ImportError:
        raise EvaluationError(f"{ev.data}: reading .npz needs NumPy where the publish runs") from None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            if "x" not in arrays or ev.label not in arrays:
                raise EvaluationError(f"{ev.data}: needs the arrays 'x' and {ev.label!r}")
            x = arrays["x"][: ev.max_rows]
            y = arrays[ev.label][: ev.max_rows]
    except EvaluationError:
        raise
    except Exception as exc:  # a damaged or hostile file: numpy's own error, named
        raise EvaluationError(f"{ev.data} is not a readable .npz file: {exc}"[:300]) from None
    if x.dtype.kind not in "iuf" or y.dtype.kind not in "iufb" or len(x) != len(y):
        raise EvaluationError(f"{ev.data}: 'x' and {ev.label!r} must be numeric arrays of the same length")
    rows = [[float(v) for v in row.reshape(-1)] for row in x]
    labels = [float(v) for v in y.reshape(len(y), -1)[:, 0]]
    if not all(math.isfinite(v) for row in rows for v in row) or not all(map(math.isfinite, labels)):
        raise EvaluationError(f"{ev.data}: holds a value that is not finite")
    return rows, labels


def requests(ev: Evaluation, rows: list[list[float]]) -> list[dict[str, Any]]:
    """The predict bodies (row format), ``batch_size`` rows each."""
    out = []
    for i in range(0, len(rows), ev.batch_size):
        batch = rows[i : i + ev.batch_size]
        instances: list[Any] = [{ev.input: r} for r in batch] if ev.input else batch
        out.append({"instances": instances})
    return out


# -- the metrics ----------------------------------------------------------------------------
def scores(ev: Evaluation, predictions: list[Any]) -> list[list[float]]:
    """Each prediction's class probabilities (or its one score) from the model's answers."""
    out: list[list[float]] = []
    for i, p in enumerate(predictions):
        if isinstance(p, dict):
            name = ev.output or ("probabilities" if "probabilities" in p else None)
            if name is None:
                if len(p) != 1:
                    raise EvaluationError(
                        f"the model answers several outputs ({', '.join(sorted(map(str, p))[:8])}): "
                        f"name the one with the class probabilities or score ({WHERE}.output)"
                    )
                (name,) = p
            if name not in p:
                raise EvaluationError(f"prediction {i + 1} has no output {name!r}")
            p = p[name]
        values = p if isinstance(p, list) else [p]
        out.append([_number(v, f"prediction {i + 1}") for v in values])
    return out


def compute(ev: Evaluation, predictions: list[Any], labels: list[float]) -> dict[str, float]:
    """``ev.metrics`` of ``predictions`` (the server's answers, in row order) against ``labels``."""
    if len(predictions) != len(labels):
        raise EvaluationError(f"{len(labels)} rows sent, {len(predictions)} predictions received")
    got = scores(ev, predictions)
    single = all(len(s) == 1 for s in got)
    classes = [float(s[0] >= 0.5) if single else float(max(range(len(s)), key=s.__getitem__)) for s in got]
    out: dict[str, float] = {}
    n = len(labels)
    for name in ev.metrics:
        if name == "accuracy":
            out[name] = sum(c == y for c, y in zip(classes, labels, strict=True)) / n
        elif name == "loss":
            out[name] = _cross_entropy(got, labels, single)
        elif name in ("mse", "mae"):
            if not single:
                raise EvaluationError(f"{name} needs one score per row; the model answers {len(got[0])}")
            errors = [s[0] - y for s, y in zip(got, labels, strict=True)]
            out[name] = sum(e * e if name == "mse" else abs(e) for e in errors) / n
        else:
            positive = [s[0] if single else (s[1] if len(s) > 1 else 0.0) for s in got]
            truth = [y == 1.0 for y in labels]
            if name == "auc":
                out[name] = _auc(positive, truth)
            else:
                predicted = [c == 1.0 for c in classes]
                tp = sum(p and t for p, t in zip(predicted, truth, strict=True))
                base = sum(predicted) if name == "precision" else sum(truth)
                out[name] = tp / base if base else 0.0
    return {k: round(v, 6) for k, v in out.items()}


def _cross_entropy(got: list[list[float]], labels: list[float], single: bool) -> float:
    total = 0.0
    for s, y in zip(got, labels, strict=True):
        if single:
            p = min(max(s[0], EPSILON), 1 - EPSILON)
            total -= y * math.log(p) + (1 - y) * math.log(1 - p)
        else:
            k = int(y)
            if not 0 <= k < len(s) or k != y:
                raise EvaluationError(f"label {y:g} is not a class of an output of {len(s)} probabilities")
            total -= math.log(min(max(s[k], EPSILON), 1.0))
    return total / len(labels)


def _auc(score: list[float], truth: list[bool]) -> float:
    """The probability that a positive row scores above a negative one (ties count half)."""
    order = sorted(range(len(score)), key=score.__getitem__)
    ranks = [0.0] * len(score)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and score[order[j + 1]] == score[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    pos = sum(truth)
    neg = len(truth) - pos
    if not pos or not neg:
        raise EvaluationError("auc needs rows of both classes (label 1 and another)")
    rank_sum = sum(r for r, t in zip(ranks, truth, strict=True) if t)
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def differences(
    ev: Evaluation, measured: Mapping[str, float], reported: Mapping[str, Any] | None
) -> list[str]:
    """The measured metrics further than ``max_difference`` from the training's own."""
    out = []
    for name, value in measured.items():
        claim = (reported or {}).get(name)
        if isinstance(claim, bool) or not isinstance(claim, int | float) or not math.isfinite(claim):
            continue
        if abs(claim - value) > ev.max_difference:
            out.append(f"{name}: the training reported {claim:g}, measured {value:g}")
    return out
