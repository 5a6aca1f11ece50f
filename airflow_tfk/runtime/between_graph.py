"""The ``between_graph`` loop: TF1-style replication through ``tf.compat.v1``.

Variables live on the ps (``replica_device_setter``); every worker (and the chief, if the
cluster has one) runs its own graph and ``MonitoredTrainingSession`` and exits when the
global step reaches ``--tfk_steps``; ps serve until the provider deletes them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from airflow_tfk.runtime import cluster as _cluster

if TYPE_CHECKING:
    from airflow_tfk.runtime.app import TrainingApp


def session_config(info: _cluster.TaskInfo) -> Any:
    """Sessions see only the ps and this task: a session never waits for a peer worker
    (one that has finished already, or has not started yet)."""
    import tensorflow as tf

    return tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:{info.role}/task:{info.index}"])


def wait_until_initialised(server: Any, config: Any, timeout: float) -> None:
    """A non-chief's session manager polls every 30 s for the chief to initialise the
    variables: poll every 0.5 s instead, so the workers start together."""
    import tensorflow as tf

    v1 = tf.compat.v1
    deadline = time.monotonic() + timeout
    with v1.Session(server.target, config=config) as probe:
        not_ready = v1.report_uninitialized_variables(v1.global_variables())
        while len(probe.run(not_ready)):
            if time.monotonic() > deadline:
                raise _cluster.ClusterWaitTimeout(
                    f"the chief did not initialise the variables within {timeout:g}s"
                )
            time.sleep(0.5)


def train_between_graph(app: TrainingApp) -> None:
    import tensorflow as tf

    info = app.task
    assert info is not None
    v1 = tf.compat.v1
    server = app.server()
    app.wait_for(["ps"])
    # replicas: the chief (if any) first, then the workers
    n_replicas = info.num("chief") + info.num("worker")
    replica_id = info.index + (info.num("chief") if info.role == "worker" else 0)
    is_chief = info.is_chief
    total = app.flags.steps
    graph = tf.Graph()
    with graph.as_default():
        setter = v1.train.replica_device_setter(
            worker_device=f"/job:{info.role}/task:{info.index}",
            cluster=tf.train.ClusterSpec(info.cluster),
        )
        with graph.device(setter):
            global_step = v1.train.get_or_create_global_step()
            ctx = tf.distribute.InputContext(
                num_input_pipelines=n_replicas, input_pipeline_id=replica_id, num_replicas_in_sync=1
            )
            features, labels = v1.data.make_one_shot_iterator(app.dataset(ctx)).get_next()
            app.model = model = app.build_model()
            outputs = model(features, training=True)
            loss = app.loss(labels, outputs)
            optimizer = app.build_v1_optimizer()
            hooks = [v1.train.StopAtStepHook(last_step=total)]
            train_op = optimizer.minimize(loss, global_step=global_step)
            with tf.control_dependencies([train_op]):
                step_after = global_step.read_value()
            weights = [w.value if hasattr(w, "value") else w for w in model.weights]
        config = session_config(info)
        every_ckpt = app.flags.checkpoint_every
        if not is_chief:
            wait_until_initialised(server, config, app.flags.cluster_wait)
        with v1.train.MonitoredTrainingSession(
            master=server.target,
            is_chief=is_chief,
            checkpoint_dir=app.flags.checkpoint_dir,
            save_checkpoint_steps=(every_ckpt or None) if app.flags.checkpoint_dir else None,
            save_checkpoint_secs=None,
            save_summaries_steps=None,
            save_summaries_secs=None,
            log_step_count_steps=0,
            hooks=hooks,
            config=config,
        ) as sess:
            app.step = int(sess.run(global_step))
            app.report(app.step, None, force=True)
            while not sess.should_stop():
                loss_value, step = sess.run([loss, step_after])
                app.step = min(total, int(step))
                app.report(app.step, float(loss_value))
        # The monitored session is closed; the variables live on the ps, so a plain
        # session reads the final global step (another worker may have taken the last
        # step) and, on the chief, the trained weights.
        with v1.Session(server.target, config=config) as plain:
            app.step = min(total, int(plain.run(global_step)))
            values = plain.run(weights) if is_chief else None
    if is_chief:
        fresh = app.build_model()
        fresh.set_weights(values)
        app.finish(fresh, fresh_copy=False)
