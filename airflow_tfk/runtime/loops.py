"""The TF2 training loops: ``parameter_server`` (``ParameterServerStrategy`` +
``ClusterCoordinator``), ``all_reduce`` (``MultiWorkerMirroredStrategy``) and a single
local process. The TF1 ``between_graph`` loop lives in :mod:`.between_graph`.

Every loop starts with the same setup (:func:`setup_state`): model, optimizer and step
counter built under the strategy's scope, a checkpoint of the three, resume from the
newest checkpoint, and a first progress line.
"""

from __future__ import annotations

import collections
import math
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_tfk.protocol.digits import plain_int
from airflow_tfk.runtime.exits import is_transient, log

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

    if app.notice is not None:
        app.notice.install()  # again: the strategy's start may have taken SIGTERM
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
    app.resumed(app.step)
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
    if app.notice is not None:  # what the notice's watchdog says a stop waits for
        app.notice.waiting_for("the steps scheduled on the workers")
    spc = app.flags.steps_per_call
    step_var = state.step_var

    def dataset_fn() -> Any:
        return strategy.distribute_datasets_from_function(app.dataset)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def steps(it: Any) -> Any:
        loss = tf.constant(0.0)
        for _ in tf.range(spc) if spc > 1 else range(1):
            per_replica = strategy.run(app.train_step, args=(next(it),))
            loss = strategy.reduce("MEAN", per_replica, axis=None)
        # Counted where the step ran: the counter is the true number of finished steps.
        step_var.assign_add(spc)
        return loss

    @tf.function
    def worker_fn(it: Any) -> None:
        # Nothing is returned: every output costs the chief ~0.3 ms of CPU (a remote
        # tensor handle to track and release).
        steps(it)

    @tf.function
    def marker_fn(it: Any) -> Any:
        # The progress of the cluster as this closure ends: the counter just after its
        # own steps, and its loss, as one tensor (one copy to the chief, made by the
        # coordinator's thread for that worker, so the chief's loop reads nothing remote).
        loss = steps(it)
        return tf.stack([tf.cast(step_var.read_value(), tf.float64), tf.cast(loss, tf.float64)])

    @tf.function
    def read_step() -> Any:
        return step_var.read_value()

    _PSLoop(
        app,
        coordinator,
        state,
        lambda: coordinator.schedule(worker_fn, args=(iterator,)),
        lambda: coordinator.schedule(marker_fn, args=(iterator,)),
        read_step,
    ).run()
    app.finish(app.model)


#: Seconds of steps the parameter_server loop keeps queued for the workers. The chief
#: schedules every step from Python and has to be on a CPU to do it: on a busy node (2
#: cores at load ~20, bench/bench_trainingapp.py) 1 s of queue still left the workers
#: waiting for it (0.87 of the hand-written loop, which queues every step at once), 3 s did
#: not (1.04). Still short enough for a checkpoint, or a notice, to wait for: the steps in
#: flight finish first, so none is lost.
PS_QUEUE_SECONDS = 3.0


def _finished(remote_value: Any) -> bool:
    """Has this scheduled closure run (without waiting for it)? ``RemoteValue`` has no
    public test; without the event this reads as "not yet", and the loop then reports at
    the markers it waits for, which are up to :data:`PS_QUEUE_SECONDS` older."""
    event = getattr(remote_value, "_status_available_event", None)
    return event is not None and event.is_set()


def _fetch_marker(remote_value: Any) -> Any:
    """A finished marker's values, or None when they were lost with the worker that ran it:
    the coordinator re-runs a closure whose worker fails before it returns, but a value
    computed on a worker that then died (killed, preempted, restarted) cannot be copied
    to the chief any more (``UnavailableError: failed to connect``). A marker only reports
    the cluster's counter, which lives on the ps: nothing of the training is lost."""
    try:
        return remote_value.fetch()
    except Exception as exc:
        if not is_transient(exc):
            raise
        log(f"a progress marker's worker went away before its values were read ({type(exc).__name__})")
        return None


class _PSLoop:
    """Schedules the steps of a parameter_server training and keeps it paced, reported,
    checkpointed and stoppable on notice.

    Scheduling is asynchronous, and the coordinator's queue would take every step at once.
    Every ``pace`` steps (10, or the progress interval if smaller) the closure scheduled is
    a marker, which returns the cluster's step counter and its loss. Waiting until no more
    than ``lag`` markers are unfinished keeps the workers fed with ``lag`` paces of work and
    paces this loop to them, so it wakes up evenly, once per marker that finishes. ``lag``
    follows the measured step rate: :data:`PS_QUEUE_SECONDS` of work, and at least ~8
    closures per worker. At each wake-up the newest finished marker's values make the
    progress line: the step the cluster had finished a moment ago, with nothing read from
    the ps (a read there, every pace, is a call the workers' own variable traffic queues
    behind, and cost the loop ~5 % of its speed). The ps is read once per drain, where the
    counter must be exact. A coarser pace wakes the loop in bursts, and the counter then
    jumps past progress lines.
    """

    def __init__(
        self, app: TrainingApp, coordinator: Any, state: TrainState, schedule: Any, mark: Any, read: Any
    ):
        assert app.task is not None
        self.app, self.coordinator, self.state = app, coordinator, state
        self.schedule, self.mark, self.read = schedule, mark, read
        self.total, self.spc = app.flags.steps, app.flags.steps_per_call
        self.pace = max(self.spc, min(app.flags.progress_every, 10))
        self.min_lag = max(4, -(-8 * max(1, app.task.num("worker")) * self.spc // self.pace))
        self.lag = self.min_lag
        self.every_ckpt = app.flags.checkpoint_every if state.manager is not None else 0
        self.markers: collections.deque[Any] = collections.deque()
        self.readings: collections.deque[tuple[float, int]] = collections.deque(maxlen=32)
        self.step = app.step  # the highest counter a marker returned
        self.loss: float | None = None

    def take(self, block: bool) -> None:
        """Take the finished markers off the queue (``block``: the oldest even if it has
        to be waited for) and report the newest progress among them."""
        taken = False
        while self.markers and (block or _finished(self.markers[0])):
            values = _fetch_marker(self.markers.popleft())
            if values is None:
                continue  # its worker went away: a later marker reports the same counter
            step, loss = values
            # Markers finish out of order across workers: the highest counter is the truth.
            if int(step) >= self.step:
                self.step, self.loss = int(step), (None if loss != loss else float(loss))  # NaN: none
            taken, block = True, False
        if taken:
            self.progress(self.step)

    def progress(self, step: int) -> None:
        self.follow_rate(step)
        self.app.report(min(self.total, step), self.loss)

    def follow_rate(self, step: int) -> None:
        """Size the queue to :data:`PS_QUEUE_SECONDS` of steps at the recent rate."""
        now = time.monotonic()
        if self.readings and step < self.readings[-1][1]:
            self.readings.clear()  # the counter went back (restored): a new run of readings
        self.readings.append((now, step))
        (t0, s0), (t1, s1) = self.readings[0], self.readings[-1]
        if t1 - t0 < 0.2 or s1 <= s0:
            return  # too short a window to tell a rate
        rate = (s1 - s0) / (t1 - t0)
        self.lag = max(self.min_lag, math.ceil(rate * PS_QUEUE_SECONDS / self.pace))

    def drain(self) -> None:
        """Wait until every step scheduled has run (none is lost; the counter is then
        exact), still reporting at each marker so no progress line is skipped."""
        while self.markers:
            self.take(block=True)
        self.coordinator.join()
        self.step = max(self.step, int(self.read().numpy()))
        self.progress(self.step)

    def drain_and_save(self) -> None:
        self.drain()
        self.state.save(self.app.step)

    def crossed(self, scheduled: int, every: int) -> bool:
        return bool(every) and scheduled // every > (scheduled - self.spc) // every

    def run(self) -> None:
        app, notice = self.app, self.app.notice
        scheduled = app.step
        while scheduled < self.total:
            if notice is not None and notice.received:
                app.stop_on_notice(self.drain_and_save if self.state.manager is not None else None)
            scheduled += self.spc
            if self.crossed(scheduled, self.pace) or scheduled >= self.total:
                self.markers.append(self.mark())
                self.take(block=len(self.markers) > self.lag)  # waits until the oldest has run
            else:
                self.schedule()
            if scheduled < self.total and self.crossed(scheduled, self.every_ckpt):
                self.drain_and_save()
        self.drain_and_save()


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
        # a copy left by an earlier attempt is never read back
        shutil.rmtree(write_dir, ignore_errors=True)
    state = setup_state(app, write_dir)
    total = app.flags.steps
    if app.mode == ALL_REDUCE:
        iterator = iter(strategy.distribute_datasets_from_function(app.dataset))
        app.keep_alive = iterator  # torn down with the process, not here (see TrainingApp.main)
    else:
        iterator = iter(app.dataset(None))

    @tf.function
    def step_fn(it: Any) -> Any:
        per_replica = strategy.run(app.train_step, args=(next(it),))
        return strategy.reduce("MEAN", per_replica, axis=None)

    every_ckpt = app.flags.checkpoint_every
    handler = preemption_handler(app, state) if app.mode == ALL_REDUCE else None

    def save_now() -> None:
        state.save(app.step)

    while app.step < total:
        if handler is not None:
            loss = handler.run(step_fn, iterator)
        else:
            app.stop_on_notice(save_now if state.manager is not None else None)
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


def preemption_handler(app: TrainingApp, state: TrainState) -> Any:
    """TensorFlow's ``PreemptionCheckpointHandler`` for ``all_reduce``, or None.

    On a notice to any worker, every worker saves at the same step (agreed through the
    coordination service) and stops with :class:`~.notice.Preempted`: a synchronous
    cluster cannot go on without a peer. The handler watches the app's own notice flag
    rather than installing a second SIGTERM handler, so a notice that comes while the
    strategy is still starting is not missed.
    """
    import tensorflow as tf

    from airflow_tfk.runtime.notice import Preempted

    notice = app.notice
    if notice is None or state.manager is None:
        return None

    def save() -> None:
        state.save(app.step)
        log(f"checkpoint saved on notice at step {app.step}")

    def stop() -> None:
        raise Preempted(app.step, True)

    config = tf.distribute.experimental.TerminationConfig(
        termination_watcher_fn=lambda: notice.received, exit_fn=stop, grace_period=0, save_fn=save
    )
    # The handler asks GCE's metadata server where it runs, and on a GCE CPU node (a GKE
    # node without GPU) gives up watching. The notice here is the kubelet's SIGTERM on any
    # platform, so the lookup is pointed at a closed local port: answered at once, "no".
    saved = os.environ.get("GCE_METADATA_IP")
    os.environ["GCE_METADATA_IP"] = "127.0.0.1:9"
    try:
        return tf.distribute.experimental.PreemptionCheckpointHandler(
            app.strategy.cluster_resolver, state.manager, termination_config=config
        )
    finally:
        if saved is None:
            os.environ.pop("GCE_METADATA_IP", None)
        else:
            os.environ["GCE_METADATA_IP"] = saved
