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
evaluator and says in the task log that it failed). Checkpoints of the TF2 modes only:
``parameter_server``, ``all_reduce`` and local.
"""

from __future__ import annotations

import json
import math
import os
import time
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


def run_evaluator(app: TrainingApp) -> None:
    import tensorflow as tf

    if app.mode == "between_graph":
        raise UsageError(
            "the evaluator reads TF2 checkpoints (parameter_server, all_reduce); "
            "between_graph checkpoints are TF1 Saver files"
        )
    ckpt_dir = app.flags.checkpoint_dir
    if not ckpt_dir:
        raise UsageError("the evaluator needs --tfk_checkpoint_dir (or TFK_MODEL_DIR) to find checkpoints")
    total = app.flags.steps
    model = app.local_copy_for_eval()
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfk_step")
    checkpoint = tf.train.Checkpoint(model=model, step=step_var)
    writer = tf.summary.create_file_writer(app.summary_dir_for("evaluator")) if app.flags.log_dir else None
    metrics_path = os.path.join(ckpt_dir, EVAL_METRICS_FILE)
    history: list[dict[str, Any]] = []
    seen: str | None = None
    log(f"evaluator: watching {ckpt_dir} for checkpoints (until step {total})")
    while True:
        latest = tf.train.latest_checkpoint(ckpt_dir)
        if latest is None or latest == seen:
            time.sleep(POLL_SECONDS)
            continue
        seen = latest
        checkpoint.restore(latest).expect_partial()
        step = int(step_var.numpy())
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
