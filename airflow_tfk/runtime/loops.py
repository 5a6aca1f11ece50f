"""The TF2 training loops: ``parameter_server`` (``ParameterServerStrategy`` +
``ClusterCoordinator``), ``all_reduce`` (``MultiWorkerMirroredStrategy``) and a single
local process. The TF1 ``between_graph`` loop lives in :mod:`.between_graph`.

Every loop starts with the same setup (:func:`setup_state`): model, optimizer and step
counter built under the strategy's scope, a checkpoint of the three, resume from the
newest checkpoint, and a first progress line.
"""

from __future__ import annotations

import collections
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_tfk.protocol.digits import plain_int
from airflow_tfk.runtime.exits import log

if TYPE_CHECKING:
    from airflow_tfk.runtime.app import TrainingApp

PARAMETER_SERVER = "parameter_server"
ALL_REDUCE = "all_reduce"
BETWEEN_GRAPH = "between_graph"
LOCAL = "local"


@dataclass
class TrainState:
    """What a loop needs besides the app: the step counter and where to checkpoint."""

    checkpoint: Any
    step_var: Any
    manager: Any  # writes checkpoints (None: no checkpoint dir)

    def save(self, step: int) -> None:
        self.step_var.assign(step)
        if self.manager is not None:
            self.manager.save(checkpoint_number=step)


def checkpoint_manager(checkpoint: Any, directory: str | None) -> Any:
    import tensorflow as tf

    if not directory:
        return None
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)


def setup_state(app: TrainingApp, write_dir: str | None = None) -> TrainState:
    """Build model, optimizer and step counter under ``app.strategy``'s scope, restore the
    newest checkpoint of ``--tfk_checkpoint_dir`` and print the first progress line.

    ``write_dir`` (default: the checkpoint dir) is where this task writes checkpoints.
    """
    import tensorflow as tf

    with app.strategy.scope():
        app.model = app.build_model()
        app.optimizer = app.build_optimizer()
        app.optimizer.build(app.model.trainable_variables)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfk_step")
    checkpoint = tf.train.Checkpoint(model=app.model, optimizer=app.optimizer, step=step_var)
    read_dir = app.flags.checkpoint_dir
    read_manager = checkpoint_manager(checkpoint, read_dir)
    write_dir = read_dir if write_dir is None else write_dir
    manager = read_manager if write_dir == read_dir else checkpoint_manager(checkpoint, write_dir)
    app.step = 0
    if read_manager is not None and read_manager.latest_checkpoint:
        checkpoint.restore(read_manager.latest_checkpoint).expect_partial()
        app.step = int(step_var.numpy())
        log(f"resumed from {read_manager.latest_checkpoint} at step {app.step}")
    app.report(app.step, None, force=True)
    return TrainState(checkpoint, step_var, manager)


# ---- parameter_server -------------------------------------------------------------------
#: The smallest inter-op thread pool a parameter_server worker's ``tf.distribute.Server``
#: may have. With one thread the worker never finishes the first closure the coordinator
#: sends it: the chief waits forever in ``EagerContext::MaybeRegisterFunctionRemotely``
#: after step 0 (seen on the real node, where the pod set ``TF_NUM_INTEROP_THREADS=1``,
#: and reproduced on the local backend; a pod pinned to one CPU gets one by default).
MIN_PS_INTER_OP_THREADS = 2


def server_inter_op_threads(
    mode: str | None, role: str, env: Mapping[str, str] | None = None, cpus: int | None = None
) -> int | None:
    """The inter-op pool size to give this task's server, or None to leave TensorFlow's
    own choice (``TF_NUM_INTEROP_THREADS``, else one thread per usable CPU) alone.

    Only parameter_server workers and ps are raised, and only when TensorFlow would give
    them fewer than :data:`MIN_PS_INTER_OP_THREADS`.
    """
    if mode != PARAMETER_SERVER or role not in ("worker", "ps"):
        return None
    env = os.environ if env is None else env
    raw = env.get("TF_NUM_INTEROP_THREADS", "").strip()
    wanted = plain_int(raw) or 0  # unset, negative or not a number: TensorFlow decides
    if wanted <= 0:  # TensorFlow's default: one per CPU this process may run on
        wanted = _usable_cpus() if cpus is None else cpus
    return MIN_PS_INTER_OP_THREADS if wanted < MIN_PS_INTER_OP_THREADS else None


def _usable_cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only (not macOS)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def train_parameter_server(app: TrainingApp) -> None:
    import tensorflow as tf

    info = app.task
    assert info is not None
    app.wait_for(["ps", "worker"])
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    app.strategy = strategy = tf.distribute.ParameterServerStrategy(resolver)
    app.coordinator = coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    state = setup_state(app)
    total, spc = app.flags.steps, app.flags.steps_per_call
    with strategy.scope():
        # The last loss any worker computed, kept on a ps next to the step counter, so a
        # progress line costs one read of two variables and never waits for a step.
        last_loss = tf.Variable(float("nan"), trainable=False, name="tfk_last_loss")
    step_var = state.step_var

    def dataset_fn() -> Any:
        return strategy.distribute_datasets_from_function(app.dataset)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def count(loss: Any) -> Any:
        # counted where the step ran: the counter is the true number of finished steps
        step_var.assign_add(spc)
        last_loss.assign(tf.cast(loss, tf.float32))
        return loss

    if spc == 1:

        @tf.function
        def worker_fn(it: Any) -> Any:
            per_replica = strategy.run(app.train_step, args=(next(it),))
            return count(strategy.reduce("MEAN", per_replica, axis=None))
    else:

        @tf.function
        def worker_fn(it: Any) -> Any:
            loss = tf.constant(0.0)
            for _ in tf.range(spc):
                per_replica = strategy.run(app.train_step, args=(next(it),))
                loss = strategy.reduce("MEAN", per_replica, axis=None)
            return count(loss)

    def read_progress() -> tuple[int, float | None]:
        step, loss = int(step_var.read_value().numpy()), float(last_loss.read_value().numpy())
        return min(total, step), (None if loss != loss else loss)  # NaN: no step yet

    # Scheduling is asynchronous, and the coordinator's queue would take every step at
    # once. Every `interval` steps the closure just scheduled becomes a marker; waiting
    # for the marker from `lag` intervals earlier keeps the workers fed with `lag`
    # intervals of work (at least ~8 closures per worker) and paces this loop to them.
    # The progress itself is read from the ps (the counter the workers advance), so a
    # line shows the step the cluster has finished at that moment, not the marker's.
    interval = max(spc, min(app.flags.progress_every, 10))
    lag = max(4, -(-8 * max(1, info.num("worker")) * spc // interval))
    every_ckpt = app.flags.checkpoint_every if state.manager is not None else 0
    scheduled = next_marker = app.step
    markers: collections.deque[Any] = collections.deque()
    while scheduled < total:
        rv = coordinator.schedule(worker_fn, args=(iterator,))
        scheduled += spc
        if scheduled - next_marker < interval and scheduled < total:
            continue
        markers.append(rv)
        next_marker = scheduled
        if len(markers) > lag:
            markers.popleft().fetch()  # waits until that closure has run
        app.report(*read_progress())  # printed when a line is due
        if (
            every_ckpt
            and scheduled < total
            and scheduled // every_ckpt > (scheduled - interval) // every_ckpt
        ):
            # finish what is in flight so the checkpoint's step count is exact
            coordinator.join()
            markers.clear()
            step, loss = read_progress()
            app.report(step, loss)
            state.save(step)
    coordinator.join()
    step, loss = read_progress()
    app.report(step, loss)
    app.step = step
    state.save(step)
    app.finish(app.model)


# ---- all_reduce and local ---------------------------------------------------------------
def train_synchronous(app: TrainingApp) -> None:
    import tensorflow as tf

    if app.mode == ALL_REDUCE:
        assert app.task is not None
        # Peers open their ports inside the strategy's constructor: wait for names only.
        app.wait_for(["chief", "worker"], tcp=False)
        app.strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        app.strategy = tf.distribute.get_strategy()
    strategy = app.strategy
    ckpt_dir = app.flags.checkpoint_dir
    write_dir = ckpt_dir
    if ckpt_dir and not app.is_chief:
        assert app.task is not None
        # every MWMS worker must take part in saving; only the chief's copy is kept
        write_dir = os.path.join(ckpt_dir, ".tmp", f"{app.task.role}-{app.task.index}")
    state = setup_state(app, write_dir)
    total = app.flags.steps
    if app.mode == ALL_REDUCE:
        iterator = iter(strategy.distribute_datasets_from_function(app.dataset))
    else:
        iterator = iter(app.dataset(None))

    @tf.function
    def step_fn(it: Any) -> Any:
        per_replica = strategy.run(app.train_step, args=(next(it),))
        return strategy.reduce("MEAN", per_replica, axis=None)

    every_ckpt = app.flags.checkpoint_every
    while app.step < total:
        loss = step_fn(iterator)
        app.step += 1
        if app.progress_due(app.step):
            app.report(app.step, float(loss))
        if every_ckpt and app.step % every_ckpt == 0 and app.step < total:
            state.save(app.step)
    state.save(app.step)
    if write_dir != ckpt_dir and write_dir:
        shutil.rmtree(write_dir, ignore_errors=True)
    app.finish(app.model)
