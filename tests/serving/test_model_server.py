"""The stand-in model server under abuse: bursts, malformed requests, non-finite inputs,
versions that are missing or not numbers, and its gRPC API. One real server process
(real TensorFlow, the tiny SavedModels of ``tests.serving.models``); pytest itself never
imports TensorFlow."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_tfk.protocol.model_config import ModelConfig, ModelServerConfig
from airflow_tfk.runtime.model_server.manager import ModelManager, poll, version_dirs
from airflow_tfk.runtime.model_server.metrics import Metrics
from airflow_tfk.serving._http import request_json
from tests.serving.stand_in import stand_in_server

ROOT = Path(__file__).resolve().parents[2]
ROWS = {"instances": [[1.0, 2.0]]}


@dataclass
class Server:
    rest: int
    grpc: int
    twin: Path  # a model whose directory holds non-numeric names
    store: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest}"


def _wait(what: str, check, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _available(url: str) -> bool:
    try:
        status, body = request_json("GET", url, timeout=2)
    except OSError:
        return False
    return status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"


@pytest.fixture(scope="module")
def server(model_store, tmp_path_factory):
    store = model_store.ready()
    d = tmp_path_factory.mktemp("stand-in")
    twin = d / "twin"
    shutil.copytree(store / "linear" / "1", twin / "1")
    for odd in ("²", "٣", "tmp-2", "-1"):  # isdigit() accepts the first two
        (twin / odd).mkdir()
    models = (
        ModelConfig("linear", str(store / "linear"), versions=(1, 9), labels={"stable": 1}),
        ModelConfig("twin", str(twin)),
    )
    flags = (
        "--model_config_file_poll_wait_seconds=0.2",
        "--file_system_poll_wait_seconds=0.2",
        "--rest_api_timeout_in_ms=500",
        "--rest_api_max_body_bytes=4096",
        "--rest_api_num_threads=4",
    )
    # Ready: version 1 AVAILABLE.
    with stand_in_server(
        d, models, *flags, ready=lambda s: _available(f"{s.url}/v1/models/linear/versions/1")
    ) as s:
        yield Server(s.rest, s.grpc, twin, store, s.log)


def _raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[str, float]:
    """Send raw bytes; (status line, seconds until the answer)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        answer = b""
        while b"\r\n" not in answer:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode(), time.monotonic() - start


def _post(path: str, headers: str, body: bytes = b"") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode() + body


# -- pure parts (no server) ---------------------------------------------------------------
def test_version_dirs_skip_names_that_are_not_base10_integers(tmp_path: Path) -> None:
    for name in ("3", "12", "²", "٣", "1e3", "-1", "07", " 4", "x1"):
        (tmp_path / name).mkdir()
    (tmp_path / "5").write_text("a file, not a version")
    assert version_dirs(str(tmp_path)) == [3, 7, 12]


def test_poll_thread_survives_any_error_and_logs_it(tmp_path: Path, capfd) -> None:
    config = tmp_path / "models.config"
    config.write_text(ModelServerConfig((ModelConfig("m", str(tmp_path / "m")),)).to_text())
    manager = ModelManager()
    calls = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise KeyError("boom")

    manager.reconcile = flaky  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=poll, args=(manager, str(config), 0.05, 0.05, stop), daemon=True)
    thread.start()
    _wait("the poll to go on after two failures", lambda: len(calls) >= 4, timeout=10)
    stop.set()
    thread.join(timeout=5)
    assert "config poll failed, retrying: KeyError: 'boom'" in capfd.readouterr().err


def test_metrics_render_counts_and_a_cumulative_histogram() -> None:
    m = Metrics()
    m.observe("linear", "predict", "REST", "OK", 0.0002)
    m.observe("linear", "predict", "REST", "OK", 0.003)
    m.observe("linear", "predict", "REST", "INVALID_ARGUMENT", 0.00005)
    text = m.render()
    assert ':tensorflow:serving:request_count{entrypoint="REST",model_name="linear",status="OK"} 2' in text
    lat = ':tensorflow:serving:request_latency_bucket{API="predict",entrypoint="REST",model_name="linear",'
    assert f'{lat}le="100"}} 1' in text and f'{lat}le="250"}} 2' in text and f'{lat}le="+Inf"}} 3' in text


# -- the real server ------------------------------------------------------------------------
@pytest.mark.e2e
def test_a_burst_of_200_concurrent_requests_meets_no_reset(server: Server) -> None:
    n = 200
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def one(i: int) -> None:
        barrier.wait()
        try:
            status, body = request_json("POST", f"{server.url}/v1/models/linear:predict", ROWS, timeout=60)
            results[i] = status if body == {"predictions": [[3.0]]} else body
        except OSError as exc:
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [r for r in results if r != 200]
    assert errors == [], f"{len(errors)} of {n} failed, e.g. {errors[:3]}"


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ("Content-Length: abc\r\n", b"{}", "400"),
        ("Content-Length: -1\r\n", b"", "400"),
        ("Content-Length: 2\r\nContent-Length: 3\r\n", b"{}", "400"),
        ("", b"", "411"),  # a POST without a length
        ("Transfer-Encoding: chunked\r\n", b"0\r\n\r\n", "411"),
        ("Content-Length: 5000\r\n", b"x" * 10, "413"),  # the limit is 4096 here
        ("Content-Length: 100\r\n", b"{", "408"),  # announces more than it sends
    ],
)
def test_malformed_requests_get_an_answer_not_a_hung_thread(server, headers, body, status) -> None:
    line, seconds = _raw(server.rest, _post("/v1/models/linear:predict", headers, body))
    assert line.split(" ")[1] == status, line
    assert seconds < 5  # the read timeout is 0.5 s here
    assert _available(f"{server.url}/v1/models/linear/versions/1")  # and the server is fine


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("instances", "message"),
    [
        ("[[1e400, 2]]", "out of the range of a double"),
        ("[[NaN, 2]]", "NaN is not a number"),
        ("[[Infinity, 2]]", "Infinity is not a number"),
        ("[[1e39, 2]]", "not a finite float32"),
    ],
)
def test_non_finite_inputs_are_refused_with_400(server, instances, message) -> None:
    req = urllib.request.Request(
        f"{server.url}/v1/models/linear:predict", data=f'{{"instances": {instances}}}'.encode(), method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)  # loopback
    assert refused.value.code == 400
    assert message in json.loads(refused.value.read())["error"]


@pytest.mark.e2e
def test_a_missing_version_says_why(server: Server) -> None:
    for method, path, body in (
        ("GET", "/v1/models/linear/versions/9", None),
        ("POST", "/v1/models/linear/versions/9:predict", ROWS),
    ):
        status, answer = request_json(method, server.url + path, body)
        assert status == 404
        assert "in the version policy but" in answer["error"] and "linear/9 does not exist" in answer["error"]
    status, answer = request_json("POST", f"{server.url}/v1/models/linear/versions/7:predict", ROWS)
    assert status == 404 and "version policy: [1, 9]" in answer["error"]


@pytest.mark.e2e
def test_non_numeric_version_dirs_are_skipped_and_later_versions_still_load(server: Server) -> None:
    assert _available(f"{server.url}/v1/models/twin/versions/1")
    # the poll thread is alive: a version that appears later is picked up
    shutil.copytree(server.store / "linear" / "2", server.twin / "2")
    _wait("twin version 2", lambda: _available(f"{server.url}/v1/models/twin/versions/2"), timeout=60)
    status, body = request_json("GET", f"{server.url}/v1/models/twin")
    assert {e["version"] for e in body["model_version_status"]} == {"1", "2"}
    status, answer = request_json("POST", f"{server.url}/v1/models/twin:predict", ROWS)
    assert (status, answer) == (200, {"predictions": [[6.0]]})
    assert "config poll failed" not in server.log.read_text()


@pytest.mark.e2e
def test_prometheus_page_counts_requests(server: Server) -> None:
    request_json("POST", f"{server.url}/v1/models/linear/labels/stable:predict", ROWS)
    status, text = request_json("GET", f"{server.url}/monitoring/prometheus/metrics")
    assert status == 200
    ok = [
        line
        for line in text.splitlines()
        if line.startswith(
            ':tensorflow:serving:request_count{entrypoint="REST",model_name="linear",status="OK"}'
        )
    ]
    assert ok and int(ok[0].rsplit(" ", 1)[1]) >= 1
    assert (
        ':tensorflow:serving:request_latency_count{API="predict",entrypoint="REST",model_name="linear"}'
        in text
    )


GRPC_SCRIPT = r"""
import json, sys
import grpc
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc
from airflow_tfk.runtime.model_server.grpc_client import GrpcPredictError, predict, signature_inputs

address, saved = sys.argv[1], sys.argv[2]
inputs = signature_inputs(saved)
out = {"inputs": sorted(inputs)}
out["stable"] = predict(address, "linear", {"instances": [[1.0, 2.0]]}, inputs, label="stable")
out["v2"] = predict(address, "linear", {"inputs": {"inputs": [[1.0, 1.0]]}}, inputs, version=2)
try:
    predict(address, "linear", {"instances": [[1.0, 2.0]]}, inputs, version=9)
except GrpcPredictError as exc:
    out["missing"] = str(exc)
req = get_model_status_pb2.GetModelStatusRequest()
req.model_spec.name = "linear"
with grpc.insecure_channel(address) as ch:
    reply = model_service_pb2_grpc.ModelServiceStub(ch).GetModelStatus(req, timeout=10)
state = get_model_status_pb2.ModelVersionStatus.State
out["status"] = sorted((s.version, state.Name(s.state)) for s in reply.model_version_status)
print(json.dumps(out))
"""


@pytest.mark.e2e
def test_grpc_predict_and_model_status_with_the_official_protos(server: Server, tmp_path: Path) -> None:
    # version 2 joins the policy so the gRPC call can pick a version explicitly
    config = ModelServerConfig(
        (
            ModelConfig("linear", str(server.store / "linear"), versions=(1, 2, 9), labels={"stable": 1}),
            ModelConfig("twin", str(server.twin)),
        )
    )
    cfg_path = Path(server.log.parent, "models.config")
    cfg_path.write_text(config.to_text())
    _wait("version 2", lambda: _available(f"{server.url}/v1/models/linear/versions/2"), timeout=60)
    out = subprocess.run(
        [sys.executable, "-c", GRPC_SCRIPT, f"127.0.0.1:{server.grpc}", str(server.store / "linear" / "1")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["inputs"] == ["inputs"]
    assert got["stable"] == {"predictions": [[3.0]], "model_version": 1}
    assert got["v2"] == {"outputs": [[4.0]], "model_version": 2}
    assert "NOT_FOUND" in got["missing"] and "does not exist" in got["missing"]
    assert got["status"] == [[1, "AVAILABLE"], [2, "AVAILABLE"]]
    status, text = request_json("GET", f"{server.url}/monitoring/prometheus/metrics")
    assert 'entrypoint="GRPC",model_name="linear",status="OK"' in text
