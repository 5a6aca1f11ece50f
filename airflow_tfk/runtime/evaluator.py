"""The evaluator role: a side-car that evaluates each new checkpoint on held-out data.

In the manner of TF's ``SidecarEvaluator``: it polls ``--tfk_checkpoint_dir`` (the
directory the training checkpoints to), restores each new checkpoint into a plain local
model (:meth:`TrainingApp.build_model`), calls :meth:`TrainingApp.evaluate`, and

- writes each metric as a TensorBoard scalar at the checkpoint's step, under
  ``<log dir>/<cluster>/evaluator-<i>`` beside the chief's training loss;
- writes the newest metrics and their history to ``tfk_eval_metrics.json`` next to the
  checkpoints (``<checkpoint dir>/``);
- prints an ``eval_metrics`` event line, which the provider puts in XCom.

It stops by itself after evaluating the checkpoint of the last step (``--tfk_steps``).
Its failure never fails the training (the provider's success policy ignores the
evaluator and says in the task log that it failed).

Both kinds of checkpoint are read: the TF2 modes' object-based ``tf.train.Checkpoint``
(``parameter_server``, ``all_reduce``, local), and ``between_graph``'s TF1 ``Saver`` files
written by the chief's ``MonitoredTrainingSession``, which are keyed by variable name
(``sequential/dense/kernel``, ``global_step``): each weight of the local model is found
by its name below the model's own (Keras numbers a second model ``sequential_1``).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_tfk.runtime import progress as _progress
from airflow_tfk.runtime.exits import UsageError, log

if TYPE_CHECKING:
    from airflow_tfk.runtime.app import TrainingApp

EVAL_METRICS_FILE = "tfk_eval_metrics.json"
POLL_SECONDS = 2.0


def numeric(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics that can be TensorBoard scalars."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, default=str)
    os.replace(tmp, path)  # a reader never sees half a file


def _tf2_restorer(model: Any) -> Callable[[str], int]:
    import tensorflow as tf

    step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfk_step")
    checkpoint = tf.train.Checkpoint(model=model, step=step_var)

    def restore(path: str) -> int:
        checkpoint.restore(path).expect_partial()
        return int(step_var.numpy())

    return restore


def _variable_name(weight: Any) -> str:
    return str(getattr(weight, "path", None) or weight.name).split(":", 1)[0]


def tf1_keys(model: Any, shapes: dict[str, list[int]]) -> list[str]:
    """The checkpoint key of each of ``model.weights``, in order (``shapes``: the
    checkpoint's ``{key: shape}``): the weight's own variable name, else the one key
    with the same name below another model name and the same shape. Raises
    :class:`UsageError` naming the first weight the checkpoint does not hold."""
    keys = []
    for weight in model.weights:
        name, shape = _variable_name(weight), list(weight.shape)
        if name in shapes and list(shapes[name]) == shape:
            keys.append(name)
            continue
        below = name.split("/", 1)[-1]  # without the model's own name
        found = [k for k, s in shapes.items() if k.endswith("/" + below) and list(s) == shape]
        if len(found) != 1:
            raise UsageError(
                f"the between_graph checkpoint has {len(found)} variable(s) for the model's "
                f"weight {name!r} {shape} (it holds: {', '.join(sorted(shapes)[:20])}); "
                "build_model() must build the model that was trained"
            )
        keys.append(found[0])
    return keys


def _tf1_restorer(model: Any) -> Callable[[str], int]:
    """Restore a TF1 ``Saver`` checkpoint into the local (eager) model by name."""
    import tensorflow as tf

    def restore(path: str) -> int:
        reader = tf.train.load_checkpoint(path)
        keys = tf1_keys(model, reader.get_variable_to_shape_map())
        model.set_weights([reader.get_tensor(k) for k in keys])
        return int(reader.get_tensor(tf.compat.v1.GraphKeys.GLOBAL_STEP))

    return restore


def run_evaluator(app: TrainingApp) -> None:
    import tensorflow as tf

    ckpt_dir = app.flags.checkpoint_dir
    if not ckpt_dir:
        raise UsageError("the evaluator needs --tfk_checkpoint_dir (or TFK_MODEL_DIR) to find checkpoints")
    total = app.flags.steps
    model = app.local_copy_for_eval()
    restore = _tf1_restorer(model) if app.mode == "between_graph" else _tf2_restorer(model)
    writer = tf.summary.create_file_writer(app.summary_dir_for("evaluator")) if app.flags.log_dir else None
    metrics_path = os.path.join(ckpt_dir, EVAL_METRICS_FILE)
    history: list[dict[str, Any]] = []
    seen: str | None = None
    log(f"evaluator: watching {ckpt_dir} for {app.mode} checkpoints (until step {total})")
    while True:
        latest = tf.train.latest_checkpoint(ckpt_dir)
        if latest is None or latest == seen:
            time.sleep(POLL_SECONDS)
            continue
        seen = latest
        try:
            step = restore(latest)
        except tf.errors.NotFoundError as exc:  # the saver dropped it (max_to_keep) meanwhile
            log(f"evaluator: {latest} is gone before it was read ({exc.message}); waiting for the next")
            continue
        metrics = app.evaluate(model)
        if metrics is None:
            raise UsageError("the evaluator has nothing to compute: override evaluate() or eval_dataset()")
        scalars = numeric(metrics)
        if writer is not None:
            with writer.as_default():
                for key, value in scalars.items():
                    tf.summary.scalar(f"eval/{key}", value, step=step)
            writer.flush()
        record = {"step": step, "checkpoint": latest, "time": time.time(), "metrics": metrics}
        history.append(record)
        _write_json(metrics_path, {**record, "history": history})
        print(_progress.event_line("eval_metrics", step=step, **metrics), flush=True)
        log(f"evaluator: step {step}: {json.dumps(metrics, default=str)}")
        if step >= total:
            log("evaluator: the last step is evaluated; stopping")
            break
    if writer is not None:
        writer.close()
