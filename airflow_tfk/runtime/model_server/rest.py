"""The REST API of the stand-in: model and version status, ``:predict``, and the
Prometheus metrics page, on a bounded pool of worker threads.

Why the server is built like this:

* a listen backlog of 1024 (``socketserver``'s default is 5, and a burst of 200
  concurrent clients then met ~40% connection resets), and at most ``workers +
  queue`` accepted connections at once: beyond that, the accept loop waits and new
  connections wait in the kernel's backlog instead of costing a thread each;
* every socket read has a timeout, so a client that announces more body than it sends,
  or goes silent, holds a worker for at most ``read_timeout`` seconds;
* ``Content-Length`` is checked before anything is read: missing on a POST (or chunked)
  -> 411, not a non-negative integer or conflicting -> 400, over the limit -> 413. After
  any of these the connection is closed, since the rest of its bytes cannot be trusted.
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from airflow_tfk.protocol.digits import MAX_VERSION, is_plain_int, model_version
from airflow_tfk.runtime.model_server.manager import ModelManager, RequestError
from airflow_tfk.runtime.model_server.metrics import Metrics
from airflow_tfk.runtime.model_server.signature import loads, run_signature

DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"
_PATH = re.compile(
    r"^/v1/models/(?P<model>[^/:]+)"
    r"(?:/versions/(?P<version>[0-9]{1,30})|/labels/(?P<label>[^/:]+))?"
    r"(?P<verb>:predict)?$"
)


def _version(text: str | None) -> int | None:
    if text is None:
        return None
    version = model_version(text)
    if version is None:
        raise RequestError(
            400, f"version {text} is out of the range of a model version (int64, at most {MAX_VERSION})"
        )
    return version


class PooledHTTPServer(HTTPServer):
    """An HTTP server whose requests run on a fixed pool of threads."""

    request_queue_size = 1024  # the listen backlog: bursts wait here instead of being reset
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type, workers: int, queue: int) -> None:
        super().__init__(address, handler)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="rest")
        self._slots = threading.BoundedSemaphore(workers + queue)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Blocks the accept loop when every slot is taken; the kernel backlog holds the rest.
        self._slots.acquire()
        try:
            self._pool.submit(self._work, request, client_address)
        except RuntimeError:  # the pool is shutting down
            self._slots.release()
            self.shutdown_request(request)

    def _work(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - one connection's failure is not the server's
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # client resets and timeouts are routine; requests log their own failures

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


class Handler(BaseHTTPRequestHandler):
    """Subclassed per server with the manager, metrics and limits set as attributes."""

    manager: ModelManager
    metrics: Metrics
    _headers_buffer: list[bytes]  # BaseHTTPRequestHandler's, untyped in typeshed
    metrics_path: str = DEFAULT_METRICS_PATH
    max_body_bytes: int = 64 << 20
    timeout = 10.0  # socket timeout of every read (StreamRequestHandler applies it)
    # Headers and body go out in one write, with Nagle off: a second small write would
    # wait for the client's delayed ACK (~40 ms per keep-alive request).
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "airflow-tfk-model-server"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def _send(self, status: int, body: dict[str, Any] | str, content_type: str = "application/json") -> None:
        data = (body if isinstance(body, str) else json.dumps(body, indent=1)).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self._headers_buffer.append(b"\r\n" + data)  # end_headers, with the body
        self.flush_headers()

    def _body(self, method: str) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(411, "Transfer-Encoding is not supported; send a Content-Length")
        values = self.headers.get_all("Content-Length") or []
        if not values:
            if method == "POST":
                raise RequestError(411, "a POST needs a Content-Length header")
            return b""
        text = {v.strip() for v in values}
        if len(text) != 1 or not all(is_plain_int(t) for t in text):
            raise RequestError(400, f"invalid Content-Length: {', '.join(values)!r}")
        length = int(text.pop())
        if length > self.max_body_bytes:
            raise RequestError(413, f"the body ({length} bytes) exceeds the limit of {self.max_body_bytes}")
        data = self.rfile.read(length)
        if len(data) != length:
            raise RequestError(400, f"the body ended after {len(data)} of {length} bytes")
        return data

    def _route(self, method: str) -> None:
        start = time.perf_counter()
        path = self.path.split("?", 1)[0]
        m = _PATH.match(path)
        model, api = (m.group("model") if m else ""), "predict"
        framed = False  # whether the body was read whole, so the connection can be reused
        try:
            try:
                raw = self._body(method)
            except TimeoutError:
                raise RequestError(408, f"the body did not arrive within {self.timeout:.0f} s") from None
            framed = True
            if method == "GET" and path == self.metrics_path:
                return self._send(200, self.metrics.render(), "text/plain; version=0.0.4")
            if not m or (method == "POST") != bool(m.group("verb")):
                raise RequestError(404, f"Malformed request: {method} {path}")
            label = m.group("label")
            version = _version(m.group("version"))
            if method == "GET":
                api = "GetModelStatus"
                return self._send(200, {"model_version_status": self.manager.statuses(model, version, label)})
            _, fn = self.manager.resolve(model, version, label)
            answer = run_signature(fn, loads(raw))
            self.metrics.observe(model, api, "REST", "OK", time.perf_counter() - start)
            return self._send(200, answer)
        except RequestError as exc:
            if not framed:
                self.close_connection = True
            if m:
                self.metrics.observe(model, api, "REST", exc.code, time.perf_counter() - start)
            return self._send(exc.status, {"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - never let one request kill the server
            self.close_connection = True
            return self._send(500, {"error": f"{type(exc).__name__}: {exc}"})

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")


def make_server(
    manager: ModelManager,
    metrics: Metrics,
    host: str,
    port: int,
    *,
    workers: int = 16,
    queue: int = 256,
    read_timeout: float = 10.0,
    max_body_bytes: int = 64 << 20,
    metrics_path: str = DEFAULT_METRICS_PATH,
) -> PooledHTTPServer:
    attrs = {
        "manager": manager,
        "metrics": metrics,
        "timeout": read_timeout,
        "max_body_bytes": max_body_bytes,
        "metrics_path": metrics_path,
    }
    return PooledHTTPServer((host, port), type("RestHandler", (Handler,), attrs), workers, queue)
