"""The stand-in model server's bounds under attack: what one request may make it
allocate (gRPC and REST), slow clients that trickle their headers, deeply nested JSON.

One real server process with small limits; pytest never imports TensorFlow: gRPC requests
are protobuf bytes encoded here, sent with ``grpc`` alone."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from airflow_tfk.protocol.model_config import ModelConfig
from airflow_tfk.serving._http import request_json
from tests.serving.stand_in import StandIn, stand_in_server

ROOT = Path(__file__).resolve().parents[2]
ROWS = {"instances": [[1.0, 2.0]]}
BODY_LIMIT = 1 << 20
HEADER_TIMEOUT = 1.0

pytestmark = pytest.mark.e2e


# -- protobuf by hand: tensorflow.serving.PredictRequest ------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # negative int64s are ten-byte varints
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _tensor(dims: list[int], floats: list[float] = (), content: bytes = b"", dtype: int = 1) -> bytes:
    shape = b"".join(_field(2, _varint(1 << 3) + _varint(d)) for d in dims)
    out = _varint(1 << 3) + _varint(dtype) + _field(2, shape)
    if content:
        out += _field(4, content)
    if floats:
        out += _field(5, b"".join(struct.pack("<f", f) for f in floats))
    return out


def predict_request(tensor: bytes, model: str = "linear") -> bytes:
    spec = _field(1, model.encode())
    entry = _field(1, b"inputs") + _field(2, tensor)
    return _field(1, spec) + _field(2, entry)


def grpc_predict(port: int, request: bytes, timeout: float = 30.0) -> tuple[str, str]:
    """(status code name, details) of a raw Predict call."""
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
        try:
            call(request, timeout=timeout)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details() or ""
    return "OK", ""


# -- the server -------------------------------------------------------------------------------
class Server:
    def __init__(self, stand_in: StandIn) -> None:
        self.proc, self.rest, self.grpc = stand_in.proc, stand_in.rest, stand_in.grpc
        self.url = stand_in.url

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def predict(self, timeout: float = 60.0) -> tuple[int, object]:
        return request_json("POST", f"{self.url}/v1/models/linear:predict", ROWS, timeout=timeout)


@pytest.fixture(scope="module")
def server(model_store, tmp_path_factory):
    store = model_store.ready()
    d = tmp_path_factory.mktemp("bounded")
    flags = (
        "--model_config_file_poll_wait_seconds=0.2",
        f"--rest_api_max_body_bytes={BODY_LIMIT}",
        "--rest_api_num_threads=4",
        "--rest_api_timeout_in_ms=2000",
        f"--rest_api_header_timeout_in_ms={int(HEADER_TIMEOUT * 1000)}",
        "--rest_api_max_pending_per_client=32",
    )
    models = (ModelConfig("linear", str(store / "linear"), versions=(1,)),)
    with stand_in_server(d, models, *flags, ready=lambda s: Server(s).predict(timeout=5)[0] == 200) as s:
        yield Server(s)


# -- item 3: what one request may allocate -----------------------------------------------------
@pytest.mark.parametrize(
    ("tensor", "code", "needle"),
    [
        # 51 bytes on the wire, 2,000,000 x 64 floats once a single value is repeated
        (_tensor([2_000_000, 64], [1.0]), "RESOURCE_EXHAUSTED", "declares shape [2000000, 64]"),
        (_tensor([1 << 40, 1 << 40, 1 << 40], [1.0]), "RESOURCE_EXHAUSTED", "at most"),
        (_tensor([-1, 2], [1.0]), "INVALID_ARGUMENT", "negative dimension"),
        (_tensor([1] * 40, [1.0]), "INVALID_ARGUMENT", "dimensions"),
        (_tensor([1000, 2], content=b"\x00" * 8), "INVALID_ARGUMENT", "tensor_content holds 8 bytes"),
        (_tensor([1, 2], [1.0], dtype=999), "INVALID_ARGUMENT", "dtype"),
    ],
    ids=["2e6x64-from-one-value", "2^120-elements", "negative-dim", "40-dims", "short-content", "bad-dtype"],
)
def test_grpc_declared_shapes_are_checked_before_any_allocation(server, tensor, code, needle) -> None:
    before = server.rss_mib()
    request = predict_request(tensor)
    assert len(request) < 256  # the first is 53 bytes
    got, details = grpc_predict(server.grpc, request)
    assert (got, needle in details) == (code, True), details
    assert server.rss_mib() - before < 50  # was +2,700 MiB for the first case
    assert server.predict()[0] == 200


def test_grpc_messages_over_the_limit_are_refused_by_grpc_itself(server) -> None:
    tensor = _tensor([1, 2], content=b"\x00" * (2 * BODY_LIMIT))
    got, _ = grpc_predict(server.grpc, predict_request(tensor))
    assert got == "RESOURCE_EXHAUSTED"


def test_a_valid_grpc_request_still_answers(server) -> None:
    got, details = grpc_predict(server.grpc, predict_request(_tensor([1, 2], [1.0, 2.0])))
    assert got == "OK", details


def test_rest_lists_are_checked_against_the_limit_before_numpy_makes_an_array(server) -> None:
    # 0.75 MiB of text that declares 131,072 x 2 values: 2 MiB as float64
    rows = "[" + ",".join(["[1,2]"] * (1 << 17)) + "]"
    body = f'{{"instances": {rows}}}'.encode()
    assert len(body) < BODY_LIMIT
    before = server.rss_mib()
    status, answer = _raw_post(server.rest, body)
    assert status == 413 and "declares shape [131072, 2]" in answer["error"], answer
    assert server.rss_mib() - before < 100


# -- item 17: deep JSON -------------------------------------------------------------------------
@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deeply_nested_json_is_a_400_with_a_clear_message(server, depth) -> None:
    body = b'{"instances": ' + b"[" * depth + b"]" * depth + b"}"
    status, answer = _raw_post(server.rest, body)
    assert status == 400 and "nested too deeply" in answer["error"], answer


def _raw_post(port: int, body: bytes) -> tuple[int, dict]:
    head = f"POST /v1/models/linear:predict HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1])


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


# -- item 4: slow clients -------------------------------------------------------------------------
class SlowClients:
    """``n`` connections that each send one byte of a request head every ``every`` s, and
    reconnect when the server drops them."""

    def __init__(self, port: int, n: int, every: float) -> None:
        self.port, self.n, self.every = port, n, every
        self.stop = threading.Event()
        self.dropped = 0
        self.threads = [threading.Thread(target=self._one, daemon=True) for _ in range(n)]

    def _one(self) -> None:
        head = b"POST /v1/models/linear:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
        while not self.stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
                    for i in range(len(head)):
                        s.sendall(head[i : i + 1])
                        if self.stop.wait(self.every):
                            return
                    s.recv(1)
            except OSError:
                pass
            self.dropped += 1

    def __enter__(self) -> SlowClients:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=15)


def test_slow_clients_are_dropped_and_ordinary_predicts_answer(server) -> None:
    base = server.rss_mib()
    with SlowClients(server.rest, 300, every=0.5) as slow:
        time.sleep(2 * HEADER_TIMEOUT)  # every slow connection is open and trickling
        seconds: list[float] = []
        errors: list[object] = []

        def ordinary() -> None:
            start = time.monotonic()
            try:
                status, body = server.predict(timeout=60)
                if (status, body) != (200, {"predictions": [[3.0]]}):
                    errors.append((status, body))
            except OSError as exc:
                errors.append(exc)
            seconds.append(time.monotonic() - start)

        clients = [threading.Thread(target=ordinary) for _ in range(200)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
        peak = server.rss_mib()
    seconds.sort()
    p99 = seconds[int(0.99 * len(seconds)) - 1]
    print(
        f"300 slow + 200 ordinary: p50 {seconds[99]:.3f} s, p99 {p99:.3f} s, RSS {base:.0f} -> {peak:.0f} MiB"
    )
    assert errors == [], f"{len(errors)} of 200 ordinary predicts failed, e.g. {errors[:3]}"
    assert p99 < 10, f"p99 {p99:.2f} s"
    assert slow.dropped >= 300  # every slow connection was dropped at least once
    assert peak - base < 150, f"RSS {base:.0f} -> {peak:.0f} MiB"
