"""First request after a new version is loaded, with TF Serving warm-up records and without,
side by side in one run, on the local model server's manager.

    .venv/bin/python bench/bench_serving_warmup.py [--rounds 7]

A small Keras MLP (64 features -> 10) is exported the way a training exports it
(``airflow_tfk.runtime.export.export_model``: Keras' ExportArchive, the sample request and
its warm-up record). The server process is warm first (a stable version loaded and
answering), as it is when a candidate is promoted. Then each round loads a fresh copy of
the export as a new version, once with its warm-up file and once with it removed
(alternating, so machine noise hits both alike), and times the first predict through the
server's own path (``run_arrays`` on the loaded signature), then a second one. The verdict
is the ratio of the medians of the first requests (with / without).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import parser as bench_parser

FEATURES = 64


def export(base: str) -> str:
    import keras
    import numpy as np
    import tensorflow as tf

    from airflow_tfk.runtime.export import export_model

    model = keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)]
    )
    sample = np.random.default_rng(1).normal(size=(3, FEATURES)).astype(np.float32)
    path = export_model(
        model,
        base=base,
        name="mlp",
        version=1,
        signature=[tf.TensorSpec([None, FEATURES], tf.float32, name="inputs")],
        serve=lambda m, x: {"scores": m(x)},
        sample=sample,
    )
    assert path is not None
    return path


def load(base: str, version: int):
    from airflow_tfk.protocol.model_config import ModelConfig
    from airflow_tfk.runtime.model_server.manager import ModelManager

    manager = ModelManager()
    manager.apply({"mlp": ModelConfig(name="mlp", base_path=f"{base}/mlp", versions=(version,))})
    while manager.versions["mlp"][version].state == "LOADING":
        time.sleep(0.01)
    ver = manager.versions["mlp"][version]
    assert ver.state == "AVAILABLE", ver.error_message
    return manager, ver.fn


def main() -> int:
    args = bench_parser(__doc__, rounds=7).parse_args()
    import numpy as np

    from airflow_tfk.runtime.model_server.signature import run_arrays
    from airflow_tfk.runtime.warmup import WARMUP_FILE

    feeds = {"inputs": np.random.default_rng(2).normal(size=(1, FEATURES)).astype(np.float32)}
    base = tempfile.mkdtemp(prefix="tfk-bench-warmup-")
    try:
        first = export(base)
        _keep, stable = load(base, 1)  # the server is warm: a stable version answers
        for _ in range(20):
            run_arrays(stable, feeds)
        times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        version = 1
        for _ in range(args.rounds):
            for warm in (True, False):
                version += 1
                path = os.path.join(base, "mlp", str(version))
                shutil.copytree(first, path)
                if not warm:
                    os.remove(os.path.join(path, "assets.extra", WARMUP_FILE))
                manager, fn = load(base, version)
                t0 = time.perf_counter()
                run_arrays(fn, feeds)
                t1 = time.perf_counter()
                run_arrays(fn, feeds)
                t2 = time.perf_counter()
                times[warm].append((t1 - t0, t2 - t1))
                del manager, fn
        for warm in (True, False):
            firsts = [f * 1e3 for f, _ in times[warm]]
            seconds = [s * 1e3 for _, s in times[warm]]
            what = "with warm-up" if warm else "without"
            print(
                f"{what:<14} first request median {statistics.median(firsts):7.2f} ms "
                f"(min {min(firsts):6.2f}, max {max(firsts):7.2f})   second request median "
                f"{statistics.median(seconds):6.2f} ms"
            )
        with_ = statistics.median(f for f, _ in times[True])
        without = statistics.median(f for f, _ in times[False])
        ratio = with_ / without
        print(
            "first request after load, with / without warm-up records: "
            + f"{ratio:.2f} ({args.rounds} rounds each)"
        )
        return 0 if ratio < 1 else 1
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
