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

    build_all(sys.argv[1])
