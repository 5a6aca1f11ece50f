"""Steps/second of a TrainingApp vs a hand-written ParameterServerStrategy loop.

    .venv/bin/python bench/bench_trainingapp.py [--steps 3000] [--warmup 500] [--rounds 2]

One local cluster (1 ps + 2 workers on 127.0.0.1) serves both; the chief is started
alternately as the digits TrainingApp (default platform flags: a progress line every 10
steps; no checkpoints, no export) and as the hand-written loop of the TensorFlow
ParameterServerStrategy tutorial (schedule every step, join at the end) on the same model,
data, optimizer and batch size. Each measures steady-state steps/s after ``--warmup``
steps (tracing, connection set-up and start-up excluded); the median of the rounds is
compared. Target: the TrainingApp at most 3 % slower (ratio >= 0.97), with the checkpoint on
notice in place (the loop looks at its flag before every step it schedules).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGET_RATIO = 0.97


# ---- the hand-written loop (what a user would write without the platform) ---------------
def baseline_chief(steps: int, warmup: int, batch_size: int, lr: float) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    from airflow_tfk.runtime.examples.digits_app import load_data

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)]
        )
        optimizer = keras.optimizers.Adam(lr)
        optimizer.build(model.trainable_variables)

    def dataset_fn(input_context):
        x, y, _, _ = load_data()
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if input_context.num_input_pipelines > 1:
            ds = ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return ds.shuffle(len(x)).repeat().batch(batch_size).prefetch(2)

    iterator = iter(
        coordinator.create_per_worker_dataset(lambda: strategy.distribute_datasets_from_function(dataset_fn))
    )

    @tf.function
    def train_fn(it):
        def replica_fn(batch):
            features, labels = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels, model(features, training=True))
                )
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.reduce("MEAN", strategy.run(replica_fn, args=(next(it),)), axis=None)

    for _ in range(warmup):
        coordinator.schedule(train_fn, args=(iterator,))
    coordinator.join()
    t0 = time.time()
    for _ in range(steps - warmup):
        result = coordinator.schedule(train_fn, args=(iterator,))
    coordinator.join()
    elapsed = time.time() - t0
    print(
        json.dumps(
            {
                "bench": "baseline",
                "steps": steps - warmup,
                "seconds": elapsed,
                "steps_per_second": (steps - warmup) / elapsed,
                "loss": float(result.fetch()),
            }
        ),
        flush=True,
    )


# ---- orchestration --------------------------------------------------------------------------
def app_rate(stdout: str, warmup: int, steps: int) -> dict:
    from airflow_tfk.runtime.progress import parse_line

    lines = [p for p in map(parse_line, stdout.splitlines()) if p is not None]
    start = next(p for p in lines if p.step >= warmup and p.status == "running")
    end = next(p for p in lines if p.step >= steps and p.status == "running")
    elapsed = end.time - start.time
    return {
        "bench": "trainingapp",
        "steps": end.step - start.step,
        "seconds": elapsed,
        "steps_per_second": (end.step - start.step) / elapsed,
        "loss": end.loss,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--baseline-chief", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from airflow_tfk.runtime.examples.digits_app import DigitsApp

    lr = DigitsApp.learning_rate
    if args.baseline_chief:
        baseline_chief(args.steps, args.warmup, args.batch_size, lr)
        return 0

    from tests.runtime.localcluster import LocalCluster

    app_cmd = [
        sys.executable,
        "-m",
        "airflow_tfk.runtime.examples.digits_app",
        "--tfk_steps",
        str(args.steps),
        "--tfk_batch_size",
        str(args.batch_size),
        "--tfk_checkpoint_every",
        "0",
    ]
    # the hand-written script reads TF_CONFIG: run it through the launcher, as any plain
    # TensorFlow script would be
    base_cmd = [
        sys.executable,
        "-m",
        "airflow_tfk.runtime.launch",
        "--",
        sys.executable,
        __file__,
        "--baseline-chief",
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--batch-size",
        str(args.batch_size),
    ]
    chief_cmd = {"cmd": app_cmd}

    def command(role, index):
        return chief_cmd["cmd"] if role == "chief" else app_cmd

    results: dict[str, list[float]] = {"trainingapp": [], "baseline": []}
    with (
        tempfile.TemporaryDirectory(prefix="tfk-bench-") as tmp,
        LocalCluster(
            Path(tmp), {"chief": 1, "ps": 1, "worker": 2}, command, mode="parameter_server", name="bench"
        ) as cluster,
    ):
        cluster.start_all(("ps", "worker"))
        for r in range(args.rounds):
            for kind in ("trainingapp", "baseline") if r % 2 == 0 else ("baseline", "trainingapp"):
                chief_cmd["cmd"] = app_cmd if kind == "trainingapp" else base_cmd
                cluster.start("chief", 0)
                rc = cluster.wait("chief", 0, timeout=600)
                out = cluster.stdout("chief", 0)
                if rc != 0:
                    print(cluster.describe(), file=sys.stderr)
                    return 1
                if kind == "trainingapp":
                    res = app_rate(out, args.warmup, args.steps)
                else:
                    res = json.loads(next(ln for ln in out.splitlines() if ln.startswith('{"bench"')))
                results[kind].append(res["steps_per_second"])
                print(
                    f"round {r + 1} {kind:12s} {res['steps_per_second']:8.1f} steps/s "
                    f"({res['steps']} steps in {res['seconds']:.2f} s, loss {res['loss']:.4f})",
                    flush=True,
                )
    faster = sum(a >= b for a, b in zip(results["trainingapp"], results["baseline"], strict=True))
    app = statistics.median(results["trainingapp"])
    base = statistics.median(results["baseline"])
    ratio = app / base
    print(
        json.dumps(
            {
                "trainingapp_steps_per_second": round(app, 1),
                "handwritten_steps_per_second": round(base, 1),
                "ratio": round(ratio, 3),
                "target_ratio": TARGET_RATIO,
                "slower_by_percent": round(100 * (1 - ratio), 1),
                "meets_target": ratio >= TARGET_RATIO,
                "rounds": args.rounds,
                "rounds_trainingapp_not_slower": faster,
                "steps": args.steps,
                "warmup": args.warmup,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
