"""Training metrics in Prometheus' text format, on the task's metrics port.

The spec's ``metrics_port`` declares the port on every task's container (with
``prometheus.io/*`` scrape annotations) and hands it to the task as ``TFK_METRICS_PORT``;
the task that runs the training loop serves what its progress reporter sees:

- ``tfk_training_steps_total``: the global step (a counter: ``rate()`` gives steps/s);
- ``tfk_training_total_steps``, ``tfk_training_start_time_seconds``;
- ``tfk_training_steps_per_second`` and ``tfk_training_examples_per_second`` over the last
  reports (examples: steps x the per-replica batch size);
- ``tfk_training_loss``: the last loss reported (absent until there is one).

Every sample carries the task (``role``, ``index``) and the cluster's name. The standard
library serves it from a daemon thread: nothing here may stop or slow the training, so a
port that cannot be bound is a warning in the task's log, not an error.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from airflow_tfk.runtime.exits import log

_RATE_WINDOW = 10  # reports the rates are measured over


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class TrainingMetrics:
    """The values one task exports; :meth:`update` is called by the progress reporter."""

    def __init__(self, labels: dict[str, str], total_steps: int, batch_size: int) -> None:
        self._labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        self.total_steps = total_steps
        self.batch_size = batch_size
        self.start_time = time.time()
        self.step = 0
        self.loss: float | None = None
        self._history: deque[tuple[float, int]] = deque(maxlen=_RATE_WINDOW)
        self._lock = threading.Lock()

    def update(self, step: int, loss: float | None, now: float | None = None) -> None:
        with self._lock:
            self.step = max(self.step, int(step))
            if loss is not None and math.isfinite(loss):
                self.loss = float(loss)
            self._history.append((time.monotonic() if now is None else now, self.step))

    def steps_per_second(self) -> float:
        with self._lock:
            if len(self._history) < 2:
                return 0.0
            (t0, s0), (t1, s1) = self._history[0], self._history[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else 0.0

    def text(self) -> str:
        """The exposition, in Prometheus' text format 0.0.4."""
        rate = self.steps_per_second()
        rows: list[tuple[str, str, str, float]] = [
            ("tfk_training_steps_total", "counter", "global training step", self.step),
            ("tfk_training_total_steps", "gauge", "steps the training runs in all", self.total_steps),
            (
                "tfk_training_start_time_seconds",
                "gauge",
                "when this task started, UNIX time",
                self.start_time,
            ),
            ("tfk_training_steps_per_second", "gauge", "steps per second over the last reports", rate),
            (
                "tfk_training_examples_per_second",
                "gauge",
                "examples per second per replica over the last reports",
                rate * self.batch_size,
            ),
        ]
        if self.loss is not None:
            rows.append(("tfk_training_loss", "gauge", "the last training loss reported", self.loss))
        out = []
        for name, kind, help_text, value in rows:
            out += [
                f"# HELP {name} {help_text}",
                f"# TYPE {name} {kind}",
                f"{name}{{{self._labels}}} {value!r}",
            ]
        return "\n".join(out) + "\n"


def serve(metrics: TrainingMetrics, port: int, path: str = "/metrics", host: str = "") -> Any:
    """Serve ``metrics`` at ``http://<host>:<port><path>`` from a daemon thread; the server,
    or None when the port cannot be bound (said in the log; the training goes on)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server protocol
            if self.path.split("?", 1)[0] != path:
                self.send_error(404)
                return
            body = metrics.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - a scrape is no news
            return

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        log(f"metrics: cannot serve on port {port} ({exc}); training goes on without them")
        return None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="tfk-metrics", daemon=True).start()
    log(f"metrics: Prometheus text at :{server.server_address[1]}{path}")
    return server
