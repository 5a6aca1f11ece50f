"""A plain TF1-style between-graph training script (no airflow_tfk import).

In a cluster spec it is the bare command with ``legacy_tf1_flags: true`` (``mode:
between_graph``); the provider appends the flags and runs it behind the launcher::

    command: [python, airflow_tfk/runtime/examples/tf1_between_graph.py, --train_steps, "400"]
    legacy_tf1_flags: true

By hand, outside the provider::

    python -m airflow_tfk.runtime.launch --tf1-flags -- \
        python airflow_tfk/runtime/examples/tf1_between_graph.py --train_steps 400

Logistic regression on scikit-learn's bundled breast_cancer data (569 rows, 30 features,
standardised; 75 % train, 25 % held out), variables on the ps via
``replica_device_setter``, asynchronous updates from every worker,
``MonitoredTrainingSession`` (worker 0 is the chief and checkpoints to
``--checkpoint_dir``). Every worker trains until the global step reaches ``--train_steps``,
prints its held-out accuracy as ``{"tfk": "metrics", ...}`` and exits 0; the target is
accuracy >= 0.90 (``ACCURACY_THRESHOLD``). ps tasks serve forever.
It also prints progress lines in the platform's format (docs/architecture.md).

Written as the seeds' scripts are: no ``device_filters``, no wait for the chief. The
launcher gives its sessions the filters (``airflow_tfk.runtime.tf1_shim``), so a worker
never waits for a peer that has already exited.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

ACCURACY_THRESHOLD = 0.90
v1 = tf.compat.v1


def load_data(seed: int = 0):
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    order = np.random.RandomState(seed).permutation(len(x))
    x, y = x[order].astype("float32"), y[order].astype("float32")
    cut = int(0.75 * len(x))
    mean, std = x[:cut].mean(axis=0), x[:cut].std(axis=0) + 1e-6
    x = (x - mean) / std
    return x[:cut], y[:cut], x[cut:], y[cut:]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--ps_hosts", required=True)
    p.add_argument("--worker_hosts", required=True)
    p.add_argument("--job_name", required=True, choices=["ps", "worker"])
    p.add_argument("--task_index", type=int, required=True)
    p.add_argument("--train_steps", type=int, default=400)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=0.05)
    p.add_argument("--checkpoint_dir", default=None)
    p.add_argument("--progress_every", type=int, default=50)
    args = p.parse_args(argv)

    v1.disable_eager_execution()
    cluster = tf.train.ClusterSpec({"ps": args.ps_hosts.split(","), "worker": args.worker_hosts.split(",")})
    server = tf.distribute.Server(cluster, job_name=args.job_name, task_index=args.task_index)
    if args.job_name == "ps":
        server.join()  # serves until the platform deletes it
        return 0

    is_chief = args.task_index == 0
    x_train, y_train, x_test, y_test = load_data()
    with v1.device(
        v1.train.replica_device_setter(worker_device=f"/job:worker/task:{args.task_index}", cluster=cluster)
    ):
        global_step = v1.train.get_or_create_global_step()
        x = v1.placeholder(tf.float32, [None, x_train.shape[1]], name="x")
        y = v1.placeholder(tf.float32, [None], name="y")
        w = v1.get_variable("w", [x_train.shape[1], 1], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [1], initializer=v1.zeros_initializer())
        logits = tf.squeeze(tf.matmul(x, w) + b, axis=1)
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.cast(logits > 0, tf.float32), y), tf.float32))
        opt = v1.train.GradientDescentOptimizer(args.learning_rate)
        hooks = [v1.train.StopAtStepHook(last_step=args.train_steps)]
        train_op = opt.minimize(loss, global_step=global_step)

    rng = np.random.RandomState(1 + args.task_index)
    start = time.time()
    last_print = -1

    def progress(step, loss_value, status="running"):
        print(
            json.dumps(
                {
                    "tfk": "progress",
                    "step": int(step),
                    "total_steps": args.train_steps,
                    "loss": None if loss_value is None else float(loss_value),
                    "start_time": start,
                    "time": time.time(),
                    "status": status,
                }
            ),
            flush=True,
        )

    with v1.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=is_chief,
        checkpoint_dir=args.checkpoint_dir,
        save_checkpoint_steps=100 if args.checkpoint_dir else None,
        save_checkpoint_secs=None,
        save_summaries_steps=None,
        save_summaries_secs=None,
        log_step_count_steps=0,
        hooks=hooks,
    ) as sess:
        step, loss_value = 0, None
        while not sess.should_stop():
            idx = rng.randint(0, len(x_train), args.batch_size)
            _, step, loss_value = sess.run(
                [train_op, global_step, loss], feed_dict={x: x_train[idx], y: y_train[idx]}
            )
            if step // args.progress_every > last_print:
                last_print = step // args.progress_every
                progress(step, loss_value)
    # The monitored session is closed once the last step is reached; the variables live
    # on the ps, so a plain session reads the trained model.
    with v1.Session(server.target) as plain:
        test_accuracy, step = plain.run([accuracy, global_step], feed_dict={x: x_test, y: y_test})
    print(
        json.dumps(
            {
                "tfk": "metrics",
                "accuracy": float(test_accuracy),
                "threshold": ACCURACY_THRESHOLD,
                "worker": args.task_index,
                "test_rows": len(y_test),
            }
        ),
        flush=True,
    )
    progress(min(step, args.train_steps), loss_value, "done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
