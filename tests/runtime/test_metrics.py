"""The training task's Prometheus metrics (runtime.metrics): the exposition format, a real
HTTP scrape with a rising step counter, and a port that cannot be bound (no TensorFlow)."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from airflow_tfk.runtime import metrics as m
from airflow_tfk.runtime.flags import parse_flags
from airflow_tfk.runtime.reporter import Reporter

_SAMPLE = re.compile(r'^([a-z_]+)\{((?:[a-z]+="(?:[^"\\]|\\.)*",?)*)\} (\S+)$')


def _parse(text: str) -> dict[str, float]:
    """Prometheus text format 0.0.4, strictly: HELP and TYPE before each family's sample."""
    values: dict[str, float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge")
            typed.add(name)
            continue
        match = _SAMPLE.match(line)
        assert match, line
        assert match.group(1) in typed, f"{match.group(1)} has no TYPE line"
        assert 'role="worker"' in match.group(2) and 'cluster="c\\"1"' in match.group(2)
        values[match.group(1)] = float(match.group(3))
    return values


def _scrape(port: int, path: str = "/metrics") -> tuple[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def test_a_scrape_sees_the_step_rise_and_the_rates_and_loss() -> None:
    exported = m.TrainingMetrics(
        {"role": "worker", "index": "0", "cluster": 'c"1'}, total_steps=100, batch_size=32
    )
    server = m.serve(exported, 0, "/metrics", host="127.0.0.1")
    assert server is not None
    try:
        port = server.server_address[1]
        kind, text = _scrape(port)
        assert kind.startswith("text/plain; version=0.0.4")
        first = _parse(text)
        assert first["tfk_training_steps_total"] == 0 and "tfk_training_loss" not in first
        reporter = Reporter(100, every=10, enabled=False, log_dir=None, metrics=exported)
        for step, t in ((10, 1.0), (20, 2.0), (40, 3.0)):
            reporter.report(step, 0.5 / step)
            exported._history[-1] = (t, step)  # a known clock for the rate
        after = _parse(_scrape(port)[1])
        assert after["tfk_training_steps_total"] == 40 > first["tfk_training_steps_total"]
        assert after["tfk_training_steps_per_second"] == pytest.approx(15.0)
        assert after["tfk_training_examples_per_second"] == pytest.approx(15.0 * 32)
        assert after["tfk_training_loss"] == pytest.approx(0.5 / 40)
        assert after["tfk_training_total_steps"] == 100
        with pytest.raises(urllib.error.HTTPError) as missing:
            _scrape(port, "/other")
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_in_use_is_a_warning_and_the_training_goes_on(capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert m.serve(m.TrainingMetrics({}, 1, 1), port, host="127.0.0.1") is None
    said = capsys.readouterr()
    assert f"metrics: cannot serve on port {port}" in said.err


def test_the_port_and_path_come_from_the_task_environment() -> None:
    flags, _ = parse_flags([], env={"TFK_METRICS_PORT": "9100", "TFK_METRICS_PATH": "/m"})
    assert (flags.metrics_port, flags.metrics_path) == (9100, "/m")
    unset, _ = parse_flags([], env={})
    assert (unset.metrics_port, unset.metrics_path) == (None, "/metrics")


def _held(port: int, source: str, first: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.sendall(first)
    return sock


def _threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(m.HANDLER_THREAD))


def _still_open(sock: socket.socket) -> bool:
    sock.settimeout(0)  # a look, not a wait
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True  # nothing to read, and not closed
    except OSError:
        return False


def test_slow_and_many_clients_cost_bounded_threads_and_the_scrape_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 connections from one address that send a byte of a request line (slowloris) or
    a whole head and then a trickle of header bytes, or nothing: each costs a handler
    thread only up to the per-client cap, all are closed within the head deadline, and a
    scrape from another address answers meanwhile: while the slow ones are still held,
    not once their deadline has freed the threads (an order, not a time: on a loaded
    machine the scrape may take a second; a 4 s deadline leaves it room)."""
    monkeypatch.setattr(m, "HEAD_SECONDS", 4.0)
    exported = m.TrainingMetrics({"role": "worker", "index": "0", "cluster": 'c"1'}, 10, 1)
    server = m.serve(exported, 0, host="127.0.0.1")
    assert server is not None
    port = server.server_address[1]
    held: list[socket.socket] = []
    try:
        for i in range(200):
            first = (b"G", b"GET /metrics HTTP/1.1\r\nX-a: ", b"")[i % 3]
            held.append(_held(port, "127.0.0.2", first))
        time.sleep(0.5)
        assert _threads() <= m.MAX_PER_CLIENT + 1
        assert "tfk_training_steps_total" in _scrape(port)[1]
        gone = "the scrape answered only once the slow clients were gone"
        assert any(_still_open(sock) for sock in held), gone
        deadline = time.monotonic() + m.HEAD_SECONDS + 3.0
        for sock in held:
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                closed = sock.recv(65536) == b"" or sock.recv(65536) == b""
            except ConnectionResetError:
                closed = True
            except TimeoutError:
                closed = False
            assert closed, "a slow client was still connected after the head deadline"
        # A handler closes its socket and then returns: its thread may outlive the close
        # by a moment, so the count is awaited (briefly), not read once.
        settle = time.monotonic() + 3.0
        while _threads() > 1 and time.monotonic() < settle:
            time.sleep(0.05)
        assert _threads() <= 1
    finally:
        for sock in held:
            sock.close()
        server.shutdown()
        server.server_close()


def test_a_huge_request_head_is_refused_without_reading_it_all() -> None:
    server = m.serve(m.TrainingMetrics({}, 1, 1), 0, host="127.0.0.1")
    assert server is not None
    try:
        port = server.server_address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            head = b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * (m.MAX_HEAD_BYTES * 4) + b"\r\n\r\n"
            try:
                sock.sendall(head)
                answer = sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                answer = b""
            assert b"200 OK" not in answer
        assert "tfk_training_steps_total" in _scrape(port)[1]
    finally:
        server.shutdown()
        server.server_close()
