"""The REST API of the stand-in: model and version status, ``:predict``, and the
Prometheus metrics page. Connections, request heads and slow clients are the business of
:mod:`~airflow_tfk.runtime.model_server.http_server`; this module answers one request.

* ``Content-Length`` is checked before anything is read: missing on a POST (or chunked)
  -> 411, not a non-negative integer or conflicting -> 400, over the limit -> 413. After
  any of these the connection is closed, since the rest of its bytes cannot be trusted;
* the body is read against one deadline (the read timeout plus 1 s per MiB), so a client
  that announces more than it sends, or sends it a byte at a time, gets 408;
* a body is decoded only while the server's budget of request bytes has room for it
  (:class:`~airflow_tfk.runtime.model_server.limits.Limits`): memory is bounded by the
  budget, not by the number of clients.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from airflow_tfk.protocol.digits import MAX_VERSION, is_plain_int, model_version
from airflow_tfk.runtime.model_server.http_server import Connection, ReactorHTTPServer, Reader, Writer
from airflow_tfk.runtime.model_server.limits import Limits
from airflow_tfk.runtime.model_server.manager import ModelManager, RequestError
from airflow_tfk.runtime.model_server.metrics import Metrics
from airflow_tfk.runtime.model_server.signature import loads, run_signature

DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"
# Bodies up to this size skip the in-flight budget: ``workers`` of them decode in far less
# memory than one large body, and a client trickling a large body cannot stall them.
SMALL_BODY = 1 << 20
_PATH = re.compile(
    r"^/v1/models/(?P<model>[^/:]+)"
    r"(?:/versions/(?P<version>[0-9]{1,30})|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|(?P<verb>:predict))?$"
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


def _api(method: str, m: re.Match[str] | None) -> str:
    """The API's name in the request metrics, as TF Serving names it."""
    if method == "POST":
        return "predict"
    return "GetModelMetadata" if m and m.group("metadata") else "GetModelStatus"


class Handler(BaseHTTPRequestHandler):
    """Subclassed per server with the manager, metrics and limits set as attributes."""

    manager: ModelManager
    metrics: Metrics
    limits: Limits
    rfile: Reader  # type: ignore[assignment]
    wfile: Writer  # type: ignore[assignment]
    _headers_buffer: list[bytes]  # BaseHTTPRequestHandler's, untyped in typeshed
    metrics_path: str = DEFAULT_METRICS_PATH
    max_body_bytes: int = 64 << 20
    timeout = 10.0  # the read timeout of a body (and the write timeout of an answer)
    # Headers and body go out in one write, with Nagle off: a second small write would
    # wait for the client's delayed ACK (~40 ms per keep-alive request).
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "airflow-tfk-model-server"

    def setup(self) -> None:
        conn, self.rfile, self.wfile = self.request
        self.connection = conn.sock

    def handle(self) -> None:
        # one request per dispatch: between requests the connection waits in the reactor
        self.close_connection = True
        self.handle_one_request()

    def finish(self) -> None:
        pass

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's name
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

    def _length(self, method: str) -> int:
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(411, "Transfer-Encoding is not supported; send a Content-Length")
        values = self.headers.get_all("Content-Length") or []
        if not values:
            if method == "POST":
                raise RequestError(411, "a POST needs a Content-Length header")
            return 0
        text = {v.strip() for v in values}
        if len(text) != 1 or not all(is_plain_int(t) for t in text):
            raise RequestError(400, f"invalid Content-Length: {', '.join(values)!r}"[:300])
        length = int(text.pop())
        if length > self.max_body_bytes:
            raise RequestError(413, f"the body ({length} bytes) exceeds the limit of {self.max_body_bytes}")
        return length

    def _read(self, length: int) -> bytes:
        self.rfile.body_deadline(length)
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            raise RequestError(
                408, "the body did not arrive in time (read timeout plus 1 s per MiB)"
            ) from None
        if len(data) != length:
            raise RequestError(400, f"the body ended after {len(data)} of {length} bytes")
        return data

    def _route(self, method: str) -> None:
        start = time.perf_counter()
        path = self.path.split("?", 1)[0]
        m = _PATH.match(path)
        model, api = (m.group("model") if m else ""), _api(method, m)
        framed = False  # whether the body was read whole, so the connection can be reused
        length = -1
        try:
            length = self._length(method)
            # A small body is read and decoded at once; a large one waits for room in the
            # budget first, so large bodies in memory are bounded by it, not by the workers.
            with self.limits.hold(length, "the body") if length > SMALL_BODY else nullcontext():
                raw = self._read(length)
                framed = True
                status, answer, kind = self._answer(method, path, m, raw)
            if m and method == "POST":
                self.metrics.observe(model, api, "REST", "OK", time.perf_counter() - start)
            return self._send(status, answer, kind)
        except RequestError as exc:
            if not framed and exc.status == 503 and length > 0:
                # refused for want of room, unread: drop the body so the client, still
                # sending it, reads the answer instead of a connection reset
                self.rfile.body_deadline(length)
                with suppress(OSError):
                    self.rfile.skip(length)
            if not framed:
                self.close_connection = True
            if m:
                self.metrics.observe(model, api, "REST", exc.code, time.perf_counter() - start)
            return self._send(exc.status, {"error": str(exc)})
        except Exception as exc:  # never let one request kill the server
            self.close_connection = True
            return self._send(500, {"error": f"{type(exc).__name__}: {exc}"[:2000]})

    def _answer(self, method: str, path: str, m: re.Match[str] | None, raw: bytes) -> tuple[int, Any, str]:
        if method == "GET" and path == self.metrics_path:
            return 200, self.metrics.render(), "text/plain; version=0.0.4"
        if not m or (method == "POST") != bool(m.group("verb")):
            raise RequestError(404, f"Malformed request: {method} {path}"[:300])
        model, label = m.group("model"), m.group("label")
        version = _version(m.group("version"))
        if m.group("metadata"):
            return 200, self.manager.metadata(model, version, label), "application/json"
        if method == "GET":
            return (
                200,
                {"model_version_status": self.manager.statuses(model, version, label)},
                "application/json",
            )
        _, fn = self.manager.resolve(model, version, label)
        answer = run_signature(fn, loads(raw), self.limits.max_request_bytes)
        return 200, answer, "application/json"

    def do_GET(self) -> None:  # the stdlib's name
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")


@dataclass(frozen=True)
class ServerOptions:
    """The bounds and timeouts of the REST server, from the command line's flags.
    ``max_body_bytes`` bounds a REST body, a gRPC message and the inputs either declares;
    ``inflight_bytes`` (None: the same) the requests decoded at once, over both APIs."""

    workers: int = 16
    read_timeout: float = 10.0
    max_body_bytes: int = 64 << 20
    metrics_path: str = DEFAULT_METRICS_PATH
    inflight_bytes: int | None = None
    header_timeout: float = 10.0
    max_connections: int = 1024
    max_pending_per_client: int = 64

    def limits(self) -> Limits:
        return Limits(
            max_request_bytes=self.max_body_bytes,
            inflight_bytes=self.inflight_bytes,
            wait_seconds=self.read_timeout,
        )


def make_server(
    manager: ModelManager,
    metrics: Metrics,
    host: str,
    port: int,
    options: ServerOptions,
    limits: Limits,
) -> ReactorHTTPServer:
    attrs = {
        "manager": manager,
        "metrics": metrics,
        "limits": limits,
        "timeout": options.read_timeout,
        "max_body_bytes": options.max_body_bytes,
        "metrics_path": options.metrics_path,
    }
    handler = type("RestHandler", (Handler,), attrs)

    def serve(conn: Connection, reader: Reader, writer: Writer) -> bool:
        done = handler((conn, reader, writer), (conn.client, 0), server)
        return not done.close_connection

    server = ReactorHTTPServer(
        (host, port),
        serve,
        workers=options.workers,
        read_timeout=options.read_timeout,
        header_timeout=options.header_timeout,
        max_connections=options.max_connections,
        max_pending_per_client=options.max_pending_per_client,
        # a body over the limit is refused (413) by the handler at once, never awaited
        max_prefetch=min(64 << 10, options.max_body_bytes),
    )
    return server
