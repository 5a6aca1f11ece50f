"""A synchronous TF1 between-graph script as users write it (test fixture): flags for the
cluster, ``SyncReplicasOptimizer`` over every worker, ``MonitoredTrainingSession`` with
its defaults (``stop_grace_period_secs`` among them). Nothing of this project's."""

import argparse
import time

import numpy as np
import tensorflow as tf

v1 = tf.compat.v1
v1.disable_eager_execution()

p = argparse.ArgumentParser()
p.add_argument("--ps_hosts")
p.add_argument("--worker_hosts")
p.add_argument("--job_name")
p.add_argument("--task_index", type=int)
p.add_argument("--train_steps", type=int, default=100)
a = p.parse_args()
cluster = tf.train.ClusterSpec({"ps": a.ps_hosts.split(","), "worker": a.worker_hosts.split(",")})
server = tf.distribute.Server(cluster, job_name=a.job_name, task_index=a.task_index)
if a.job_name == "ps":
    server.join()
workers = len(a.worker_hosts.split(","))
is_chief = a.task_index == 0
with v1.device(
    v1.train.replica_device_setter(worker_device=f"/job:worker/task:{a.task_index}", cluster=cluster)
):
    step = v1.train.get_or_create_global_step()
    x = v1.placeholder(tf.float32, [None, 4])
    y = v1.placeholder(tf.float32, [None, 1])
    w = v1.get_variable("w", [4, 1])
    loss = v1.reduce_mean(v1.square(v1.matmul(x, w) - y))
    opt = v1.train.SyncReplicasOptimizer(
        v1.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=workers, total_num_replicas=workers
    )
    train = opt.minimize(loss, global_step=step)
hooks = [opt.make_session_run_hook(is_chief), v1.train.StopAtStepHook(last_step=a.train_steps)]
rng = np.random.RandomState(a.task_index)
with v1.train.MonitoredTrainingSession(master=server.target, is_chief=is_chief, hooks=hooks) as sess:
    while not sess.should_stop():
        xs = rng.rand(8, 4).astype("float32")
        sess.run(train, {x: xs, y: xs.sum(1, keepdims=True)})
print(f"exited {time.time()}", flush=True)
