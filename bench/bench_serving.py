"""Latency (p50/p99) and throughput of predict on the local stand-in model server, over
REST and over gRPC, against calling the same SavedModel's signature in-process.

    .venv/bin/python bench/bench_serving.py [--requests 1000] [--clients 4] [--seconds 5]

One run, one machine, one model (a small MLP, 64 features -> 10 outputs, exported on the
spot): the in-process baseline is measured in this process, the servers in one stand-in
subprocess (``python -m airflow_tfk.runtime.model_server``). Latency: ``--requests``
sequential calls over one persistent connection (HTTP keep-alive; one gRPC channel),
after a warm-up. Throughput: ``--clients`` threads calling as fast as they can for
``--seconds``. The overhead is reported as ratios against the in-process baseline.
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--seconds", type=float, default=5.0)
    args = p.parse_args()

    import grpc
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from airflow_tfk import _process
    from airflow_tfk.protocol.model_config import ModelConfig, ModelServerConfig

    tmp = tempfile.mkdtemp(prefix="bench-serving-")
    path = export(tmp)
    config = Path(tmp, "models.config")
    config.write_text(ModelServerConfig((ModelConfig("mlp", os.path.dirname(path)),)).to_text())
    rest, grpc_port = _process.free_port(), _process.free_port()
    log = open(Path(tmp, "server.log"), "wb")  # noqa: SIM115 - closed at the end
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
