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

The server lives in the training's process, so what a client may make it spend is bounded:
a thread per connection, but at most :data:`MAX_CONNECTIONS` of them and
:data:`MAX_PER_CLIENT` per client address (more are closed at once); the whole request
head must arrive within :data:`HEAD_SECONDS` and :data:`MAX_HEAD_BYTES`, however slowly
it trickles; one request per connection. A scrape is a small GET: nothing more is needed.
"""

from __future__ import annotations

import io
import math
import socket
import threading
import time
from collections import Counter, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from airflow_tfk.runtime.exits import log

_RATE_WINDOW = 10  # reports the rates are measured over
MAX_CONNECTIONS = 32
MAX_PER_CLIENT = 8
HEAD_SECONDS = 2.0
MAX_HEAD_BYTES = 8 << 10
HANDLER_THREAD = "tfk-metrics-request"


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


def _read_head(sock: socket.socket) -> bytes | None:
    """The request head, read against one deadline (a per-read timeout would let a client
    sending a byte a second hold the connection forever); None past the bounds."""
    deadline = time.monotonic() + HEAD_SECONDS
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        left = deadline - time.monotonic()
        if left <= 0 or len(head) > MAX_HEAD_BYTES:
            return None
        sock.settimeout(left)
        try:
            chunk = sock.recv(4096)
        except OSError:
            return None
        if not chunk:
            return None
        head += chunk
    return head


class _BoundedServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops the SYNs of a burst (each then waits a 1 s
    # retransmit): refusing a connection at once needs it accepted first
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        super().__init__(address, handler)
        self._lock = threading.Lock()
        self._clients: Counter[str] = Counter()

    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0])
        with self._lock:
            full = sum(self._clients.values()) >= MAX_CONNECTIONS or self._clients[client] >= MAX_PER_CLIENT
            if not full:
                self._clients[client] += 1
        if full:
            self.shutdown_request(request)
            return
        thread = threading.Thread(
            target=self._run, args=(request, client_address, client), name=HANDLER_THREAD, daemon=True
        )
        thread.start()

    def _run(self, request: Any, client_address: Any, client: str) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._clients[client] -= 1
                if not self._clients[client]:
                    del self._clients[client]


def serve(metrics: TrainingMetrics, port: int, path: str = "/metrics", host: str = "") -> Any:
    """Serve ``metrics`` at ``http://<host>:<port><path>`` from a daemon thread; the server,
    or None when the port cannot be bound (said in the log; the training goes on)."""

    class Handler(BaseHTTPRequestHandler):
        timeout = HEAD_SECONDS  # also bounds writing the answer to a client that does not read
        # The answer leaves in one write when the handler ends: a task exiting mid-answer
        # cuts a scrape off whole, never between its head and its body.
        wbufsize = 1 << 16

        def handle(self) -> None:
            head = _read_head(self.connection)
            if head is None:
                self.close_connection = True
                return
            self.connection.settimeout(HEAD_SECONDS)
            self.rfile = io.BytesIO(head)
            self.handle_one_request()
            self.close_connection = True

        def do_GET(self) -> None:  # the http.server protocol
            if self.path.split("?", 1)[0] != path:
                self.send_error(404)
                return
            body = metrics.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # a scrape is no news
            return

    try:
        server = _BoundedServer((host, port), Handler)
    except OSError as exc:
        log(f"metrics: cannot serve on port {port} ({exc}); training goes on without them")
        return None
    threading.Thread(target=server.serve_forever, name="tfk-metrics", daemon=True).start()
    log(f"metrics: Prometheus text at :{server.server_address[1]}{path}")
    return server
