"""Progress lines on stdout (and loss summaries for TensorBoard) every N steps."""

from __future__ import annotations

import time
from typing import Any

from airflow_tfk.runtime import progress as _progress


class Reporter:
    """Prints a progress line when the step crosses a multiple of ``every`` (or when
    forced), and writes the loss as a TensorBoard scalar when ``log_dir`` is set."""

    def __init__(
        self, total: int, every: int, enabled: bool, log_dir: str | None, metrics: Any = None
    ) -> None:
        self.total, self.every, self.enabled = total, every, enabled
        self.metrics = metrics  # a runtime.metrics.TrainingMetrics, or None
        self.start_time = time.time()
        self.last_step: int | None = None
        self.last_loss: float | None = None
        self._writer: Any = None
        self._log_dir = log_dir if enabled else None

    def _summary(self, step: int, loss: float | None) -> None:
        if self._log_dir is None or loss is None:
            return
        import tensorflow as tf

        if not tf.executing_eagerly():
            # between_graph: the default graph is the training's, finalized by its
            # session, so no summary op can be added; TF1's FileWriter writes the event
            # from Python instead.
            v1 = tf.compat.v1
            if self._writer is None:
                self._writer = v1.summary.FileWriter(self._log_dir)
            self._writer.add_summary(
                v1.Summary(value=[v1.Summary.Value(tag="loss", simple_value=loss)]), step
            )
            return
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self._log_dir)
        with self._writer.as_default():
            tf.summary.scalar("loss", loss, step=step)

    def due(self, step: int) -> bool:
        return self.last_step is None or step // self.every > self.last_step // self.every

    def report(self, step: int, loss: float | None, status: str = "running", force: bool = False) -> None:
        if loss is not None:
            self.last_loss = float(loss)
        if self.metrics is not None:
            self.metrics.update(step, self.last_loss)
        if not self.enabled or not (force or self.due(step)):
            return
        self.last_step = step
        print(_progress.progress_line(step, self.total, self.last_loss, self.start_time, status), flush=True)
        if status == "running":
            self._summary(step, self.last_loss)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
