"""Tiny SavedModels in TF Serving's layout, made on the spot (no download)."""

from __future__ import annotations

import json
import os
import shutil


def save_linear(
    base: str,
    model: str,
    version: int,
    scale: float,
    features: int = 2,
    sample: list[list[float]] | None = None,
) -> str:
    """``<base>/<model>/<version>/``: serving_default(inputs[None, features]) = scale * sum."""
    import tensorflow as tf

    class Linear(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(tf.fill([features, 1], float(scale)))

        @tf.function(input_signature=[tf.TensorSpec([None, features], tf.float32, name="inputs")])
        def serve(self, inputs):
            return {"outputs": tf.matmul(inputs, self.w)}

    path = os.path.join(base, model, str(version))
    module = Linear()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    extra = os.path.join(path, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    rows = sample if sample is not None else [[1.0] * features, [2.0] * features]
    with open(os.path.join(extra, "tfk_sample_request.json"), "w") as fh:
        json.dump({"instances": rows}, fh)
    return path


def save_classifier(base: str, model: str, version: int, good: bool, claimed: float) -> str:
    """``<base>/<model>/<version>/``: a digits classifier (64 features, 10 classes) whose
    export claims ``accuracy: claimed``. ``good``: nearest class centroid of the training
    rows (about 0.9 on the held-out rows); else every class equally likely, so it answers
    class 0 for everything (chance: about 0.1)."""
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    train_x, train_y = x[:-DIGITS_HELD_OUT], y[:-DIGITS_HELD_OUT]
    if good:
        centroids = np.stack([train_x[train_y == k].mean(axis=0) for k in range(10)])
        w, b = centroids.T * 0.05, -(centroids**2).sum(axis=1) * 0.025
    else:
        w, b = np.zeros((64, 10)), np.zeros(10)

    class Classifier(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(w.astype("float32"))
            self.b = tf.Variable(b.astype("float32"))

        @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="inputs")])
        def serve(self, inputs):
            logits = tf.matmul(inputs, self.w) + self.b
            return {"probabilities": tf.nn.softmax(logits), "classes": tf.argmax(logits, axis=1)}

    path = os.path.join(base, model, str(version))
    module = Classifier()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    extra = os.path.join(path, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    with open(os.path.join(extra, "tfk_sample_request.json"), "w") as fh:
        json.dump({"instances": x[:2].tolist()}, fh)
    with open(os.path.join(extra, "tfk_metrics.json"), "w") as fh:
        json.dump({"accuracy": claimed}, fh)
    return path


#: the last rows of scikit-learn's digits: held out of the good classifier's centroids
DIGITS_HELD_OUT = 360


def write_eval_csv(base: str, relative: str, x, y) -> str:
    """Rows ``x`` (features) and labels ``y`` as an evaluation CSV in the model store: one
    column per feature, then ``label``."""
    import csv

    path = os.path.join(base, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow([f"f{i}" for i in range(len(x[0]))] + ["label"])
        for row, label in zip(x, y, strict=True):
            out.writerow([f"{float(v):g}" for v in row] + [int(label)])
    return path


def write_digits_eval(base: str, relative: str = "eval/digits.csv") -> str:
    """The held-out digits (raw pixels, as the classifiers above take them)."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return write_eval_csv(base, relative, x[-DIGITS_HELD_OUT:], y[-DIGITS_HELD_OUT:])


def build_classifiers(base: str) -> None:
    """The evaluation test's store: an honest classifier (v1) and one that claims 1.0 while
    it is no better than chance (v2), and the held-out rows."""
    save_classifier(base, "digits", 1, good=True, claimed=0.9)
    save_classifier(base, "digits", 2, good=False, claimed=1.0)
    write_digits_eval(base)


def corrupt_copy(base: str, model: str, source: int, version: int) -> str:
    """A version whose saved_model.pb is garbage: it fails to load."""
    src = os.path.join(base, model, str(source))
    dst = os.path.join(base, model, str(version))
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "saved_model.pb"), "wb") as fh:
        fh.write(b"this is not a SavedModel protobuf \x00\xff")
    return dst


def build_all(base: str) -> None:
    """Every model the serving tests use (one TensorFlow import, in a subprocess)."""
    save_linear(base, "linear", 1, scale=1.0)
    save_linear(base, "linear", 2, scale=2.0)
    corrupt_copy(base, "linear", 1, 3)
    # loads fine, but its signature takes 5 features and the sample has 2
    save_linear(base, "linear", 4, scale=1.0, features=5, sample=[[1.0, 2.0]])
    corrupt_copy(base, "linear", 1, 5)


if __name__ == "__main__":
    import sys

    if sys.argv[1] == "classifiers":
        build_classifiers(sys.argv[2])
    else:
        build_all(sys.argv[1])
