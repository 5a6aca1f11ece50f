"""Latency (p50/p99) and throughput of predict on the local stand-in model server, over
REST and over gRPC, against calling the same SavedModel's signature in-process.

    .venv/bin/python bench/bench_serving.py [--requests 1000] [--clients 4] [--seconds 5]
    .venv/bin/python bench/bench_serving.py --attack [--slow 300] [--ordinary 200]

One run, one machine, one model (a small MLP, 64 features -> 10 outputs, exported on the
spot): the in-process baseline is measured in this process, the servers in one stand-in
subprocess (``python -m airflow_tfk.runtime.model_server``). Latency: ``--requests``
sequential calls over one persistent connection (HTTP keep-alive; one gRPC channel),
after a warm-up. Throughput: ``--clients`` threads calling as fast as they can for
``--seconds``. The overhead is reported as ratios against the in-process baseline.

``--attack``: the server under abuse instead. ``--slow`` connections each send one byte
of a request head every 2 s (and reconnect when dropped) while ``--ordinary`` clients each
send one predict; then one gRPC request of ~50 bytes that declares a 2,000,000 x 64 float
tensor. Prints the ordinary predicts' p50/p99 and failures, how many slow connections
were dropped, and the server's RSS before and at its peak (sampled every 50 ms).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FEATURES = 64


def export(base: str) -> str:
    import tensorflow as tf

    class Mlp(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1 = tf.Variable(tf.random.normal([FEATURES, 128], seed=1))
            self.w2 = tf.Variable(tf.random.normal([128, 10], seed=2))

        @tf.function(input_signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="inputs")])
        def serve(self, inputs):
            return {"scores": tf.matmul(tf.nn.relu(tf.matmul(inputs, self.w1)), self.w2)}

    path = os.path.join(base, "mlp", "1")
    module = Mlp()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


def percentiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return q[49] * 1e3, q[98] * 1e3  # ms


def latency(call: Callable[[], object], n: int, warmup: int = 50) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        out.append(time.perf_counter() - t)
    return out


def throughput(make_call: Callable[[], Callable[[], object]], clients: int, seconds: float) -> float:
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        call = make_call()
        while time.perf_counter() < stop:
            call()
            counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def attack(rest: int, grpc_port: int, pid: int, slow_n: int, ordinary_n: int, body: bytes) -> None:
    import socket

    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    stop = threading.Event()
    peak = [_rss_mib(pid)]
    base = peak[0]
    dropped = [0]

    def sample() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], _rss_mib(pid))

    def slow() -> None:
        head = b"POST /v1/models/mlp:predict HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", rest), timeout=30) as s:
                    for i in range(len(head)):
                        s.sendall(head[i : i + 1])
                        if stop.wait(2.0):
                            return
                    s.recv(1)
            except OSError:
                pass
            dropped[0] += 1

    threads = [threading.Thread(target=sample, daemon=True)]
    threads += [threading.Thread(target=slow, daemon=True) for _ in range(slow_n)]
    for t in threads:
        t.start()
    time.sleep(5.0)  # every slow connection open and trickling
    seconds: list[float] = []
    failures: list[str] = []

    def ordinary() -> None:
        t0 = time.perf_counter()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", rest, timeout=60)
            conn.request("POST", "/v1/models/mlp:predict", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                failures.append(f"HTTP {resp.status}")
        except OSError as exc:
            failures.append(repr(exc))
        seconds.append(time.perf_counter() - t0)

    clients = [threading.Thread(target=ordinary) for _ in range(ordinary_n)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    under_attack = _rss_mib(pid)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mlp"
    tensor = request.inputs["inputs"]
    tensor.dtype = 1  # DT_FLOAT
    tensor.tensor_shape.dim.add().size = 2_000_000
    tensor.tensor_shape.dim.add().size = 64
    tensor.float_val.append(1.0)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{grpc_port}"))
    before_grpc = _rss_mib(pid)
    try:
        stub.Predict(request, timeout=60)
        grpc_answer = "answered OK"
    except grpc.RpcError as exc:
        grpc_answer = f"{exc.code().name}: {exc.details()[:120]}"
    time.sleep(12.0)  # past the server's 10 s header timeout: the slow ones are dropped
    stop.set()
    after_grpc = peak[0]
    seconds.sort()
    p50, p99 = percentiles(seconds)
    print(f"{slow_n} slow connections (1 header byte / 2 s) + {ordinary_n} ordinary predicts over REST")
    answered = len(seconds) - len(failures)
    print(f"ordinary: {answered} of {len(seconds)} answered 200; p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print(f"failures: {failures[:3] or 'none'}")
    print(f"slow connections dropped by the server (and reopened) within the run: {dropped[0]}")
    print(f"server RSS: {base:.0f} MiB before, {under_attack:.0f} MiB after the ordinary predicts")
    print(f"gRPC request of {request.ByteSize()} bytes declaring 2,000,000 x 64 floats: {grpc_answer}")
    print(f"server RSS: {before_grpc:.0f} MiB before it, peak {after_grpc:.0f} MiB over the whole run")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--attack", action="store_true", help="slow clients and a huge declared tensor instead")
    p.add_argument("--slow", type=int, default=300)
    p.add_argument("--ordinary", type=int, default=200)
    args = p.parse_args()

    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from airflow_tfk.core import processes as _process
    from airflow_tfk.protocol.model_config import ModelConfig, ModelServerConfig

    tmp = tempfile.mkdtemp(prefix="bench-serving-")
    path = export(tmp)
    config = Path(tmp, "models.config")
    config.write_text(ModelServerConfig((ModelConfig("mlp", os.path.dirname(path)),)).to_text())
    rest, grpc_port = _process.free_port(), _process.free_port()
    log = open(Path(tmp, "server.log"), "wb")  # closed at the end
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_tfk.runtime.model_server",
            f"--port={grpc_port}",
            f"--rest_api_port={rest}",
            "--rest_api_host=127.0.0.1",
            f"--model_config_file={config}",
            f"--rest_api_num_threads={max(4, args.clients)}",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        row = np.random.default_rng(0).normal(size=(1, FEATURES)).astype("float32")
        body = json.dumps({"instances": row.tolist()}).encode()
        fn = tf.saved_model.load(path).signatures["serving_default"]
        x = tf.constant(row)

        def inproc() -> object:
            return fn(inputs=x)["scores"].numpy()

        def rest_caller() -> Callable[[], object]:
            conn = http.client.HTTPConnection("127.0.0.1", rest, timeout=30)

            def call() -> object:
                conn.request("POST", "/v1/models/mlp:predict", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                data = resp.read()
                if resp.status != 200:
                    raise RuntimeError(data[:300])
                return data

            return call

        request = predict_pb2.PredictRequest()
        request.model_spec.name = "mlp"
        request.inputs["inputs"].CopyFrom(tf.make_tensor_proto(row))

        def grpc_caller() -> Callable[[], object]:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(
                grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
            )
            return lambda: stub.Predict(request, timeout=30)

        deadline = time.monotonic() + 180
        while True:  # until the version is AVAILABLE
            try:
                rest_caller()()
                break
            except (OSError, RuntimeError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)

        if args.attack:
            attack(rest, grpc_port, server.pid, args.slow, args.ordinary, body)
            return 0
        results = {}
        for name, make in (("in-process", lambda: inproc), ("REST", rest_caller), ("gRPC", grpc_caller)):
            p50, p99 = percentiles(latency(make(), args.requests))
            rps = throughput(make, args.clients, args.seconds)
            results[name] = (p50, p99, rps)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()

    base = results["in-process"]
    print(
        f"predict of one row, {FEATURES} features -> 10 (MLP); {args.requests} sequential calls, "
        f"{args.clients} clients x {args.seconds:.0f} s for throughput"
    )
    print(f"{'path':12} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>9}  {'p50 x':>7} {'p99 x':>7} {'req/s x':>8}")
    for name, (p50, p99, rps) in results.items():
        print(
            f"{name:12} {p50:8.3f} {p99:8.3f} {rps:9.0f}  {p50 / base[0]:7.1f} {p99 / base[1]:7.1f} "
            f"{rps / base[2]:8.2f}"
        )
    print("ratios are against calling the SavedModel in-process in this run (x: server / in-process)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
