"""The stand-in's connection layer alone (no TensorFlow): slow or oversized request heads
cost no worker and are dropped; ordinary requests are answered meanwhile."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from airflow_tfk.runtime.model_server.http_server import Connection, ReactorHTTPServer, Reader, Writer

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def _serve(conn: Connection, reader: Reader, writer: Writer) -> bool:
    while reader.readline(65537) not in (b"\r\n", b"\n", b""):
        pass
    writer.write(OK)
    return True


@pytest.fixture
def server():
    srv = ReactorHTTPServer(
        ("127.0.0.1", 0),
        _serve,
        workers=2,
        read_timeout=2.0,
        header_timeout=1.0,
        max_connections=64,
        max_pending_per_client=16,
        max_head_bytes=4096,
    )
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _ask(port: int, data: bytes = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout: float = 10.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(4096)
            out += chunk
            if not chunk or out.endswith(b"ok") or b"Connection: close" in out and b"}" in out:
                return out


def test_a_partial_head_is_answered_408_after_the_header_timeout(server) -> None:
    t0 = time.monotonic()
    answer = _ask(server.server_address[1], b"GET / HTTP/1.1\r\nHost")
    # Without the header timeout the answer would be the client's own 10 s time-out; the
    # upper bound stays below that, not at what an idle machine takes (~1 s).
    assert answer.startswith(b"HTTP/1.1 408") and 0.9 < time.monotonic() - t0 < 8


def test_a_head_over_the_limit_is_431(server) -> None:
    answer = _ask(server.server_address[1], b"GET / HTTP/1.1\r\nX: " + b"a" * 8000)
    assert answer.startswith(b"HTTP/1.1 431")


def test_keep_alive_requests_and_pipelining(server) -> None:
    two = b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as s:
        s.sendall(two)
        out = b""
        while out.count(b"ok") < 2:
            out += s.recv(4096)
    assert out == OK + OK


def test_more_slow_clients_than_connections_do_not_block_ordinary_requests(server) -> None:
    port = server.server_address[1]
    stop = threading.Event()

    def slow() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    for byte in b"GET / HTTP/1.1\r\nHost: x\r\n":
                        s.sendall(bytes([byte]))
                        if stop.wait(0.3):
                            return
            except OSError:
                pass

    threads = [threading.Thread(target=slow, daemon=True) for _ in range(150)]  # > max_connections
    for t in threads:
        t.start()
    time.sleep(2.0)
    try:
        took = []
        for _ in range(20):
            t0 = time.monotonic()
            assert _ask(port).endswith(b"ok")
            took.append(time.monotonic() - t0)
        # Blocked behind the slow heads, a request would wait out the client's 10 s time-out
        # or be refused; the bounds leave room for a loaded machine's scheduling, not for that.
        took.sort()
        assert took[len(took) // 2] < 1.5 and took[-1] < 6, took
        assert server.stats()["evicted"] + server.stats()["header_timeout"] > 0
        assert server.stats()["open"] <= 64
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)


def test_the_inflight_budget_admits_what_fits_and_refuses_the_rest_in_bounded_time() -> None:
    from airflow_tfk.runtime.model_server.limits import Limits, declared_bytes
    from airflow_tfk.runtime.model_server.manager import RequestError

    limits = Limits(max_request_bytes=100, inflight_bytes=150, wait_seconds=0.3)
    with pytest.raises(RequestError) as too_big:
        with limits.hold(101, "the body"):
            pass
    assert too_big.value.status == 413 and too_big.value.code == "RESOURCE_EXHAUSTED"
    with limits.hold(100, "the body"), limits.hold(50, "the body"):
        t0 = time.monotonic()
        with pytest.raises(RequestError) as busy:
            with limits.hold(1, "the body"):
                pass
        # without the 0.3 s wait bound this thread would wait for itself for good: the upper
        # bound only has to be finite, and wide enough for a loaded machine
        assert busy.value.status == 503 and 0.25 < time.monotonic() - t0 < 10
    with limits.hold(100, "the body"):  # released: room again
        pass
    # declared shapes: refused before the product is ever made
    with pytest.raises(RequestError, match="declares shape"):
        declared_bytes("x", [2**62] * 32, 8, 100)
    assert declared_bytes("x", [3, 0, 2**62], 4, 100) == 0
    assert declared_bytes("x", [5, 5], 4, 100) == 100


def _serve_body(conn: Connection, reader: Reader, writer: Writer) -> bool:
    """Reads a Content-Length body as the REST handler does (one deadline for the body)."""
    length = 0
    while (line := reader.readline(65537)) not in (b"\r\n", b"\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    reader.body_deadline(length)
    try:
        body = reader.read(length)
    except TimeoutError:
        body = b""
    if len(body) != length:
        writer.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        return False
    writer.write(OK)
    return True


@pytest.mark.parametrize("declared", [100, 200_000], ids=["small-body", "large-body"])
def test_slow_bodies_do_not_hold_the_workers(declared: int) -> None:
    """Clients whose head arrives whole but whose body trickles (a byte every 0.3 s): a small
    body waits in the reactor like a head, a large one gets one of half the workers or a 503;
    ordinary requests from another address are answered meanwhile."""
    srv = ReactorHTTPServer(
        ("127.0.0.1", 0), _serve_body, workers=2, read_timeout=2.0, header_timeout=1.0, max_connections=256
    )
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port = srv.server_address[1]
    stop = threading.Event()

    def slow() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(
                    ("127.0.0.1", port), timeout=5, source_address=("127.0.0.2", 0)
                ) as s:
                    s.sendall(f"POST / HTTP/1.1\r\nContent-Length: {declared}\r\n\r\n".encode())
                    for _ in range(declared):
                        s.sendall(b"x")
                        if stop.wait(0.3):
                            return
            except OSError:
                pass

    threads = [threading.Thread(target=slow, daemon=True) for _ in range(40)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    try:
        took = []
        for _ in range(10):
            t0 = time.monotonic()
            assert _ask(port).endswith(b"ok")
            took.append(time.monotonic() - t0)
        # Blocked behind the slow heads, a request would wait out the client's 10 s time-out
        # or be refused; the bounds leave room for a loaded machine's scheduling, not for that.
        took.sort()
        assert took[len(took) // 2] < 1.5 and took[-1] < 6, took
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
        srv.shutdown()
        srv.server_close()
