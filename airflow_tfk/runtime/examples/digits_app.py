"""Digits classifier on the platform's TrainingApp.

    TFK_MODE=parameter_server ... python -m airflow_tfk.runtime.examples.digits_app \
        --tfk_steps 600 --tfk_batch_size 32

scikit-learn's bundled 8x8 digits (1797 images, no download): 80 % train, 20 % held out.
A 64-64-10 MLP reaches >= 0.90 held-out accuracy (``ACCURACY_THRESHOLD``) in 600 steps of
32 images, asynchronously on 2 workers. ``after_train`` reports it as a metrics line;
the exported SavedModel's ``serving_default`` maps ``inputs`` (N x 64 floats in [0, 1])
to ``logits``, ``probabilities`` and ``classes``.
"""

from __future__ import annotations

import functools

import numpy as np

from airflow_tfk.runtime.app import TrainingApp

ACCURACY_THRESHOLD = 0.90


@functools.lru_cache(maxsize=1)
def load_data(seed: int = 0):
    """(x_train, y_train, x_test, y_test), a fixed 80/20 split."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    y = y.astype("int64")
    order = np.random.RandomState(seed).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


class DigitsApp(TrainingApp):
    """Classify scikit-learn's 8x8 digits."""

    model_name = "digits"
    learning_rate = 0.005

    def add_arguments(self, parser):
        parser.add_argument("--hidden", type=int, default=64, help="hidden units")

    def build_model(self):
        import keras

        return keras.Sequential(
            [
                keras.Input((64,), name="pixels"),
                keras.layers.Dense(getattr(self.args, "hidden", 64), activation="relu"),
                keras.layers.Dense(10, name="logits"),
            ]
        )

    def dataset(self, input_context):
        import tensorflow as tf

        x, y, _, _ = load_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if input_context is not None and input_context.num_input_pipelines > 1:
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.shuffle(len(x)).repeat().batch(self.batch_size).prefetch(2)

    def loss(self, labels, outputs):
        import tensorflow as tf

        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, outputs))

    def evaluate(self, model):
        """Held-out accuracy and loss (the evaluator role calls this per checkpoint)."""
        _, _, x_test, y_test = load_data()
        logits = model(x_test, training=False)
        accuracy = float(np.mean(np.argmax(logits, axis=1) == y_test))
        return {"accuracy": accuracy, "loss": float(self.loss(y_test, logits)), "test_rows": len(y_test)}

    def after_train(self, model):
        return {**self.evaluate(model), "threshold": ACCURACY_THRESHOLD}

    def sample_input(self):
        return load_data()[2][:3]

    def serve(self, model, inputs):
        import tensorflow as tf

        logits = model(inputs, training=False)
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits),
            "classes": tf.argmax(logits, axis=1),
        }


if __name__ == "__main__":
    DigitsApp.main()
