"""The ``between_graph`` loop: TF1-style replication through ``tf.compat.v1``.

Variables live on the ps (``replica_device_setter``); every worker (and the chief, if the
cluster has one) runs its own graph and ``MonitoredTrainingSession`` and exits when the
global step reaches ``--tfk_steps``; ps serve until the provider deletes them.

Asynchronous by default: every replica's step updates the variables. With ``--tfk_sync``
the optimizer is wrapped in ``SyncReplicasOptimizer``: the gradients of all replicas are
averaged into one update, so the global step advances once per aggregated update and
``--tfk_steps`` counts updates. Left alone, its end of training deadlocks (replicas wait
for tokens or updates that never come); here it cannot:

- every replica stops at the same global step: each waits for a token after pushing its
  gradients, and the update that reaches the last step hands one token to each;
- when the chief sees the last step it puts one more token per replica in the token
  queue (it lives on a ps, which outlives the training), before its aggregation thread
  closes the queue: a replica that is still waiting, or starts late, gets a token,
  sees the last step and stops instead of waiting for an update that never comes (and
  once the tokens are gone, a closed queue ends its session cleanly);
- the chief's aggregation thread, left waiting for gradients that will never come, is
  given 2 s to stop instead of TF's 120 s, then its session is closed under it.

On notice (SIGTERM, see :mod:`.notice`) a replica stops after its current step: the chief
first saves a checkpoint of the variables (they live on the ps, so that is the whole
training), a worker has nothing of its own to save. Both exit 76 and are restarted. A
restarted worker rejoins at the global step; a restarted (asynchronous) chief goes on
from the ps's variables when the ps kept them, and restores the newest checkpoint only
when they are gone too (a drain of every pod, a lost ps).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from airflow_tfk.runtime import cluster as _cluster
from airflow_tfk.runtime import progress as _progress
from airflow_tfk.runtime.exits import log
from airflow_tfk.runtime.notice import Preempted

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


def _chief_restore(app: TrainingApp, server: Any, config: Any, hooks: list[Any]) -> tuple[Any, Any]:
    """The chief's checkpoint dir to restore from and its scaffold.

    A restarted chief whose ps kept the variables while the other workers went on
    training goes on from them: they are newer than any checkpoint, and a restore (or the
    initialisation a chief runs when it restores nothing) would roll them back.
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    ckpt_dir, every = app.flags.checkpoint_dir, app.flags.checkpoint_every
    if not ckpt_dir or app.flags.sync or not _initialised(server, config):
        return ckpt_dir, None
    log("the ps still hold the training's variables: going on from them")
    if every:
        hooks.append(v1.train.CheckpointSaverHook(ckpt_dir, save_steps=every))
    return None, v1.train.Scaffold(init_op=v1.no_op())


def _initialised(server: Any, config: Any) -> bool:
    """Do the ps hold every variable of the graph already (a restarted chief)?"""
    import tensorflow as tf

    v1 = tf.compat.v1
    with v1.Session(server.target, config=config) as probe:
        return not len(probe.run(v1.report_uninitialized_variables(v1.global_variables())))


def _release_hook_class() -> Any:
    import tensorflow as tf

    class ReleaseHook(tf.compat.v1.train.SessionRunHook):
        """On the sync chief: once the global step reaches the last step, hand every
        replica one extra token (once)."""

        def __init__(self, release: Any, last_step: int) -> None:
            self._release, self._last_step, self._done = release, last_step, False

        def begin(self) -> None:
            self._global_step = tf.compat.v1.train.get_global_step()

        def before_run(self, run_context: Any) -> Any:
            return tf.compat.v1.train.SessionRunArgs(self._global_step)

        def after_run(self, run_context: Any, run_values: Any) -> None:
            if self._done or run_values.results + 1 < self._last_step:
                return
            if run_context.session.run(self._global_step) >= self._last_step:
                run_context.session.run(self._release)
                self._done = True

    return ReleaseHook


def _ReleaseHook(release: Any, last_step: int) -> Any:  # a class, built lazily
    return _release_hook_class()(release, last_step)


def _notice_hook_class() -> Any:
    import tensorflow as tf

    v1 = tf.compat.v1

    class NoticeHook(tf.compat.v1.train.SessionRunHook):
        """After each step: on notice, save (on the chief) and stop the session."""

        def __init__(self, notice: Any, checkpoint_dir: str | None) -> None:
            self._notice, self._dir = notice, checkpoint_dir
            self.stopped_at: int | None = None
            self.saved = False

        def begin(self) -> None:
            self._global_step = v1.train.get_global_step()

        def after_run(self, run_context: Any, run_values: Any) -> None:
            if not self._notice.received or self.stopped_at is not None:
                return
            session = run_context.session
            self.stopped_at = int(session.run(self._global_step))
            if self._dir:
                # the scaffold's saver: the one MonitoredTrainingSession restores with
                saver = v1.get_collection(v1.GraphKeys.SAVERS)[0]
                saver.save(session, os.path.join(self._dir, "model.ckpt"), global_step=self.stopped_at)
                self.saved = True
            run_context.request_stop()

    return NoticeHook


def _NoticeHook(notice: Any, checkpoint_dir: str | None) -> Any:  # a class, built lazily
    return _notice_hook_class()(notice, checkpoint_dir)


def train_between_graph(app: TrainingApp) -> None:
    import tensorflow as tf

    info = app.task
    assert info is not None
    v1 = tf.compat.v1
    server = app.server()
    if app.notice is not None:
        app.notice.install()  # again: the server's start may have taken SIGTERM
        app.notice.waiting_for("the session's step (its variables live on the ps)")
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
            hooks: list[Any] = [v1.train.StopAtStepHook(last_step=total)]
            notice_hook = None
            if app.notice is not None:
                notice_hook = _NoticeHook(app.notice, app.flags.checkpoint_dir if is_chief else None)
                hooks.append(notice_hook)
            if app.flags.sync:
                optimizer = v1.train.SyncReplicasOptimizer(
                    optimizer, replicas_to_aggregate=n_replicas, total_num_replicas=n_replicas
                )
            train_op = optimizer.minimize(loss, global_step=global_step)
            if app.flags.sync:
                # no initial tokens: every replica's first gradients are for step 0
                hooks.append(optimizer.make_session_run_hook(is_chief, num_tokens=0))
                if is_chief:
                    release = optimizer.get_init_tokens_op(num_tokens=n_replicas)
                    hooks.append(_ReleaseHook(release, total))
            with tf.control_dependencies([train_op]):
                step_after = global_step.read_value()
            weights = [w.value if hasattr(w, "value") else w for w in model.weights]
        config = session_config(info)
        every_ckpt = app.flags.checkpoint_every
        if not is_chief:
            wait_until_initialised(server, config, app.flags.cluster_wait)
        restore_dir, scaffold = _chief_restore(app, server, config, hooks) if is_chief else (None, None)
        with v1.train.MonitoredTrainingSession(
            master=server.target,
            is_chief=is_chief,
            checkpoint_dir=restore_dir,
            scaffold=scaffold,
            save_checkpoint_steps=(every_ckpt or None) if restore_dir else None,
            save_checkpoint_secs=None,
            save_summaries_steps=None,
            save_summaries_secs=None,
            log_step_count_steps=0,
            hooks=hooks,
            config=config,
            stop_grace_period_secs=2 if app.flags.sync else 120,
        ) as sess:
            app.step = int(sess.run(global_step))
            app.resumed(app.step)
            app.report(app.step, None, force=True)
            local_steps = 0
            while not sess.should_stop():
                loss_value, step = sess.run([loss, step_after])
                local_steps += 1
                app.step = min(total, int(step))
                app.report(app.step, float(loss_value))
        if notice_hook is not None and notice_hook.stopped_at is not None:
            app.step = notice_hook.stopped_at
            if notice_hook.saved:
                log(f"checkpoint saved on notice at step {app.step}")
            raise Preempted(app.step, notice_hook.saved)
        # The monitored session is closed; the variables live on the ps, so a plain
        # session reads the final global step (another worker may have taken the last
        # step) and, on the chief, the trained weights.
        with v1.Session(server.target, config=config) as plain:
            final_step = int(plain.run(global_step))
            app.step = min(total, final_step)
            values = plain.run(weights) if is_chief else None
    # how much this replica did: in sync mode every replica takes part in every update
    print(
        _progress.event_line(
            "replica", role=info.role, index=info.index, local_steps=local_steps, global_step=final_step
        ),
        flush=True,
    )
    if is_chief:
        fresh = app.build_model()
        fresh.set_weights(values)
        app.finish(fresh, fresh_copy=False)
