"""`TrainingApp`: the base class of a training program that runs on the platform.

The user writes the model, the data and the loss; the platform owns everything else:
the cluster (``TF_CONFIG`` or ``TFK_*``), the strategy for the mode, the training loop,
checkpoints and resume, progress lines, and the SavedModel export for TF Serving::

    class Digits(TrainingApp):
        model_name = "digits"

        def build_model(self):
            return keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])

        def dataset(self, input_context):          # batched (features, labels), repeated
            return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(self.batch_size)

        def loss(self, labels, outputs):
            return tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels, outputs))

        def sample_input(self):                    # a few rows for the serving smoke test
            return x[:3]

    if __name__ == "__main__":
        Digits.main()

Modes (``TFK_MODE``; inferred from the cluster when unset):

- ``parameter_server``: ``tf.distribute.ParameterServerStrategy`` + ``ClusterCoordinator``.
  The chief runs the loop and schedules steps on the workers; ps and worker tasks run a
  ``tf.distribute.Server`` and never exit by themselves (the provider deletes them).
  Always asynchronous.
- ``all_reduce``: ``MultiWorkerMirroredStrategy``; every worker runs the loop;
  synchronous.
- ``between_graph``: TF1-style replication through ``tf.compat.v1``
  (``replica_device_setter``, ``MonitoredTrainingSession``); every worker trains and exits,
  ps serve forever; asynchronous (``SyncReplicasOptimizer`` deadlocks when workers
  finish at different times, so ``--tfk_sync`` is refused: use ``all_reduce``). A chief
  task, if the cluster has one, trains as the chief replica.
- no cluster at all: a single local process (for developing an app).

Hooks to override: :meth:`build_model`, :meth:`dataset`, :meth:`loss` (or
:meth:`train_step` for a custom step), :meth:`build_optimizer`, :meth:`after_train`,
:meth:`sample_input`, :meth:`serve`, :meth:`add_arguments`; :meth:`train` replaces the
whole loop (then call :meth:`report` for progress).

Exit codes: 0 done; 1 error in the app (permanent); 2 bad flags or cluster environment
(permanent); 75 transient cluster failure (unreachable task, aborted session: retry).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from typing import Any

from airflow_tfk.runtime import cluster as _cluster
from airflow_tfk.runtime import progress as _progress
from airflow_tfk.runtime.flags import PlatformFlags, add_platform_flags

EXIT_OK = 0
EXIT_APP_ERROR = 1
EXIT_USAGE = 2
EXIT_RETRYABLE = 75  # EX_TEMPFAIL

SAMPLE_REQUEST = "tfk_sample_request.json"
METRICS_FILE = "tfk_metrics.json"

PARAMETER_SERVER = "parameter_server"
ALL_REDUCE = "all_reduce"
BETWEEN_GRAPH = "between_graph"
LOCAL = "local"
MODES = (PARAMETER_SERVER, ALL_REDUCE, BETWEEN_GRAPH)


class UsageError(Exception):
    """Flags or environment that cannot work (exit code 2)."""


def _log(msg: str) -> None:
    print(f"[tfk] {msg}", file=sys.stderr, flush=True)


def infer_mode(info: _cluster.TaskInfo | None) -> str:
    """``TFK_MODE`` if set, else from the cluster's shape."""
    if info is None:
        return LOCAL
    if info.mode:
        if info.mode not in MODES:
            raise UsageError(f"TFK_MODE must be one of {', '.join(MODES)}, got {info.mode!r}")
        return info.mode
    if info.num("ps"):
        return PARAMETER_SERVER if info.num("chief") else BETWEEN_GRAPH
    return ALL_REDUCE


def next_version(model_dir: str) -> int:
    """One more than the newest integer version under ``model_dir`` (1 if none)."""
    try:
        versions = [int(n) for n in os.listdir(model_dir) if n.isdigit()]
    except FileNotFoundError:
        versions = []
    return max(versions, default=0) + 1


class _Reporter:
    """Progress lines on stdout (and loss summaries for TensorBoard) every N steps."""

    def __init__(self, total: int, every: int, enabled: bool, log_dir: str | None):
        self.total, self.every, self.enabled = total, every, enabled
        self.start_time = time.time()
        self.last_step: int | None = None
        self.last_loss: float | None = None
        self._writer = None
        self._log_dir = log_dir if enabled else None

    def _summary(self, step: int, loss: float | None) -> None:
        if self._log_dir is None or loss is None:
            return
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(self._log_dir)
        with self._writer.as_default():
            tf.summary.scalar("loss", loss, step=step)

    def due(self, step: int) -> bool:
        return self.last_step is None or step // self.every > self.last_step // self.every

    def report(self, step: int, loss: float | None, status: str = "running", force: bool = False) -> None:
        if loss is not None:
            self.last_loss = float(loss)
        if not self.enabled or not (force or self.due(step)):
            return
        self.last_step = step
        print(_progress.progress_line(step, self.total, self.last_loss, self.start_time, status), flush=True)
        if status == "running":
            self._summary(step, self.last_loss)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()


class TrainingApp:
    """Subclass, override the hooks, and call ``MyApp.main()``."""

    #: model name under the export base, unless ``--tfk_model_name`` says otherwise
    model_name: str = "model"
    #: default learning rate of the default optimizers (``--tfk_learning_rate`` overrides)
    learning_rate: float = 0.001
    #: description in ``--help``
    description: str | None = None

    def __init__(self) -> None:
        self.flags: PlatformFlags = PlatformFlags()
        self.args = argparse.Namespace()
        self.extra_argv: list[str] = []
        self.task: _cluster.TaskInfo | None = None
        self.mode: str = LOCAL
        self.strategy: Any = None
        self.coordinator: Any = None
        self.model: Any = None
        self.optimizer: Any = None
        self.step: int = 0
        self._reporter: _Reporter | None = None

    # ==== hooks ==========================================================================
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the app's own flags (parsed into ``self.args``)."""

    def build_model(self):
        """Return a ``keras.Model`` (built, e.g. starting with ``keras.Input``)."""
        raise NotImplementedError("TrainingApp.build_model must return a keras.Model")

    def dataset(self, input_context):
        """Return a ``tf.data.Dataset`` of ``(features, labels)`` batches of
        ``self.batch_size`` rows, repeated as long as training needs.

        ``input_context`` (a ``tf.distribute.InputContext``; ``None`` in local mode) says
        which input pipeline this is, for sharding. In ``parameter_server`` mode the
        function runs on every worker.
        """
        raise NotImplementedError("TrainingApp.dataset must return a tf.data.Dataset")

    def loss(self, labels, outputs):
        """Scalar loss of one batch (a mean over its rows)."""
        raise NotImplementedError("TrainingApp.loss (or train_step) must be overridden")

    def build_optimizer(self):
        """The optimizer of the TF2 modes (default: Adam at the learning rate)."""
        import keras

        return keras.optimizers.Adam(self.lr)

    def build_v1_optimizer(self):
        """The optimizer of ``between_graph`` mode (a ``tf.compat.v1.train`` optimizer)."""
        import tensorflow as tf

        return tf.compat.v1.train.AdamOptimizer(self.lr)

    def train_step(self, batch):
        """One step on one replica; returns the loss. TF2 modes only.

        Runs inside ``tf.function`` on a worker; ``self.model`` and ``self.optimizer``
        are ready. The default computes :meth:`loss` and applies its gradients.
        """
        import tensorflow as tf

        features, labels = batch
        with tf.GradientTape() as tape:
            outputs = self.model(features, training=True)
            loss = self.loss(labels, outputs)
            if self.model.losses:
                loss = loss + tf.add_n(self.model.losses)
            ctx = tf.distribute.get_replica_context()
            replicas = ctx.num_replicas_in_sync if ctx is not None else 1
            scaled = loss / replicas if self.mode == ALL_REDUCE else loss
        variables = self.model.trainable_variables
        grads = tape.gradient(scaled, variables)
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    def train(self) -> None:
        """The training loop of the mode. Override only to replace it entirely."""
        if self.mode == PARAMETER_SERVER:
            self._train_parameter_server()
        elif self.mode == BETWEEN_GRAPH:
            self._train_between_graph()
        else:
            self._train_synchronous()

    def after_train(self, model) -> dict | None:
        """Evaluate; return metrics (JSON-serialisable) or None.

        Runs on the exporting task only (the chief, or worker 0), with a plain local
        Keras model holding the trained weights (the one that is exported).
        """
        return None

    def sample_input(self):
        """A few input rows (numpy array) for the serving smoke test, or None."""
        return None

    def serve(self, model, inputs) -> dict:
        """The ``serving_default`` signature's outputs for ``inputs``."""
        return {"outputs": model(inputs, training=False)}

    # ==== conveniences for hooks ==========================================================
    @property
    def batch_size(self) -> int:
        return self.flags.batch_size

    @property
    def lr(self) -> float:
        return self.flags.learning_rate or self.learning_rate

    @property
    def is_chief(self) -> bool:
        """True on the task that checkpoints and exports."""
        return self.task is None or self.task.is_chief

    def report(self, step: int, loss: float | None = None, force: bool = False) -> None:
        """Record progress (prints a progress line when one is due)."""
        self.step = step
        if self._reporter is not None:
            self._reporter.report(step, loss, force=force)

    # ==== entry points ====================================================================
    @classmethod
    def main(cls, argv: Sequence[str] | None = None) -> None:
        """Run the app and exit with its exit code."""
        sys.exit(cls().run(argv))

    def parse(self, argv: Sequence[str] | None = None) -> None:
        """Split the command line: ``--tfk_*`` into ``self.flags``, the app's own flags
        (:meth:`add_arguments`) into ``self.args``, anything else into ``self.extra_argv``."""
        from airflow_tfk.runtime.flags import parse_flags

        argv = list(sys.argv[1:] if argv is None else argv)
        parser = argparse.ArgumentParser(
            description=self.description or type(self).__doc__, allow_abbrev=False
        )
        add_platform_flags(parser)
        self.add_arguments(parser.add_argument_group(type(self).__name__))  # type: ignore[arg-type]
        ns, rest = parser.parse_known_args(argv)  # --help, and errors in the app's flags
        self.flags, _ = parse_flags(argv, model_name=self.model_name)
        self.args = argparse.Namespace(**{k: v for k, v in vars(ns).items() if not k.startswith("tfk_")})
        self.extra_argv = rest

    def run(self, argv: Sequence[str] | None = None) -> int:
        """Parse flags, join the cluster, train, export. Returns the exit code."""
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.parse(argv)
        try:
            self.task = (
                _cluster.ensure_tf_config()
                if os.environ.get("TF_CONFIG") or os.environ.get("TFK_CLUSTER")
                else None
            )
            self.mode = infer_mode(self.task)
        except (_cluster.ClusterConfigError, UsageError) as exc:
            _log(f"error: {exc}")
            return EXIT_USAGE
        where = "local" if self.task is None else f"{self.task.role}:{self.task.index}"
        _log(f"{type(self).__name__}: mode {self.mode}, task {where}")
        try:
            self._configure_tensorflow()
            return self._dispatch()
        except UsageError as exc:
            _log(f"error: {exc}")
            self._final_progress("failed")
            return EXIT_USAGE
        except BaseException as exc:  # noqa: B036 - report every way of dying
            traceback.print_exc()
            self._final_progress("failed")
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                return 130 if isinstance(exc, KeyboardInterrupt) else _exit_code(exc)
            return EXIT_RETRYABLE if _is_transient(exc) else EXIT_APP_ERROR

    # ==== platform internals ==============================================================
    def _final_progress(self, status: str) -> None:
        if self._reporter is not None:
            self._reporter.report(self.step, None, status=status, force=True)

    def _configure_tensorflow(self) -> None:
        import tensorflow as tf

        if self.flags.use_gpu is False:
            tf.config.set_visible_devices([], "GPU")
        elif self.flags.use_gpu and not tf.config.list_physical_devices("GPU"):
            raise UsageError("--tfk_use_gpu: no GPU is visible to this task")
        if self.flags.seed is not None:
            import keras

            keras.utils.set_random_seed(self.flags.seed)
        if self.flags.sync is True and self.mode == PARAMETER_SERVER:
            raise UsageError(
                "--tfk_sync: parameter_server mode is asynchronous only "
                "(use all_reduce for synchronous training)"
            )
        if self.flags.sync is False and self.mode == ALL_REDUCE:
            raise UsageError("--tfk_async: all_reduce mode is synchronous only")
        if self.flags.sync is True and self.mode == BETWEEN_GRAPH:
            # SyncReplicasOptimizer (deprecated) deadlocks at the end of training as soon as
            # one worker stops before the others; all_reduce is TF's synchronous mode.
            raise UsageError(
                "--tfk_sync: between_graph mode is asynchronous in this runtime; "
                "use all_reduce for synchronous training"
            )

    def _dispatch(self) -> int:
        role = self.task.role if self.task else None
        if role == "evaluator":
            _log("the evaluator role has nothing to do in this runtime yet; exiting")
            return EXIT_OK
        if self.mode in (PARAMETER_SERVER, BETWEEN_GRAPH) and (
            role == "ps" or (self.mode == PARAMETER_SERVER and role == "worker")
        ):
            self._serve_forever()
            return EXIT_OK  # not reached
        self._reporter = _Reporter(
            self.flags.steps, self.flags.progress_every, enabled=True, log_dir=self._summary_dir()
        )
        self.train()
        self._reporter.report(self.step, None, status="done", force=True)
        self._reporter.close()
        return EXIT_OK

    def _summary_dir(self) -> str | None:
        if not self.flags.log_dir:
            return None
        name = os.environ.get("TFK_CLUSTER_NAME") or self.flags.model_name or "train"
        task = "local" if self.task is None else f"{self.task.role}-{self.task.index}"
        return os.path.join(self.flags.log_dir, name, task) if self.is_chief else None

    def _server(self):
        import tensorflow as tf

        info = self.task
        assert info is not None
        return tf.distribute.Server(
            tf.train.ClusterSpec(info.cluster),
            job_name=info.role,
            task_index=info.index,
            protocol="grpc",
            start=True,
        )

    def _serve_forever(self) -> None:
        """ps (and parameter_server workers): serve until killed. By design: the
        provider deletes these tasks once training has succeeded."""
        server = self._server()
        _log(f"{self.task.role}:{self.task.index} serving at {self.task.address}")
        server.join()

    def _wait(self, roles: Sequence[str], tcp: bool = True) -> None:
        assert self.task is not None
        _cluster.wait_for_cluster(self.task, roles=roles, tcp=tcp, timeout=self.flags.cluster_wait)

    def _checkpoint_manager(self, checkpoint, directory: str | None):
        import tensorflow as tf

        if not directory:
            return None
        return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=3)

    def _restore(self, checkpoint, manager, step_var) -> int:
        if manager is None or not manager.latest_checkpoint:
            return 0
        checkpoint.restore(manager.latest_checkpoint).expect_partial()
        step = int(step_var.numpy())
        _log(f"resumed from {manager.latest_checkpoint} at step {step}")
        return step

    # ---- parameter_server ---------------------------------------------------------------
    def _train_parameter_server(self) -> None:
        import tensorflow as tf

        info = self.task
        assert info is not None
        self._wait(["ps", "worker"])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.strategy = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        with self.strategy.scope():
            self.model = self.build_model()
            self.optimizer = self.build_optimizer()
            self.optimizer.build(self.model.trainable_variables)
            step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfk_step")
        checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=step_var)
        manager = self._checkpoint_manager(checkpoint, self.flags.checkpoint_dir)
        self.step = self._restore(checkpoint, manager, step_var)
        total, spc = self.flags.steps, self.flags.steps_per_call
        self.report(self.step, None, force=True)
        strategy = self.strategy

        def dataset_fn():
            return strategy.distribute_datasets_from_function(self.dataset)

        iterator = iter(self.coordinator.create_per_worker_dataset(dataset_fn))

        if spc == 1:

            @tf.function
            def worker_fn(it):
                per_replica = strategy.run(self.train_step, args=(next(it),))
                return strategy.reduce("MEAN", per_replica, axis=None)
        else:

            @tf.function
            def worker_fn(it):
                loss = tf.constant(0.0)
                for _ in tf.range(spc):
                    per_replica = strategy.run(self.train_step, args=(next(it),))
                    loss = strategy.reduce("MEAN", per_replica, axis=None)
                return loss

        # Scheduling is asynchronous. Every `interval` steps the closure just scheduled
        # becomes a marker; the marker from `lag` intervals earlier is fetched, which gives
        # the progress (and its loss) with one round trip per interval, keeps the workers
        # fed with `lag` intervals of work (at least ~8 closures per worker), and almost
        # never waits (that step has usually run already). The other steps' results are
        # never touched.
        interval = max(spc, min(self.flags.progress_every, 10))
        lag = max(4, -(-8 * max(1, info.num("worker")) * spc // interval))
        every_ckpt = self.flags.checkpoint_every if manager is not None else 0
        scheduled = done = self.step
        markers: collections.deque = collections.deque()
        next_marker = scheduled

        while scheduled < total:
            rv = self.coordinator.schedule(worker_fn, args=(iterator,))
            scheduled += spc
            if scheduled - next_marker < interval and scheduled < total:
                continue
            markers.append((rv, scheduled))
            next_marker = scheduled
            if len(markers) > lag:
                old, old_step = markers.popleft()
                loss = float(old.fetch())  # waits until that step has run
                done = max(done, min(total, old_step))
                self.report(done, loss)
            if (
                every_ckpt
                and scheduled < total
                and scheduled // every_ckpt > (scheduled - interval) // every_ckpt
            ):
                # finish what is in flight so the checkpoint's step count is exact
                self.coordinator.join()
                done = min(total, scheduled)
                self.report(done, float(markers[-1][0].fetch()))
                markers.clear()
                step_var.assign(done)
                manager.save(checkpoint_number=done)
        self.coordinator.join()
        done = min(total, scheduled)
        if markers:
            self.report(done, float(markers[-1][0].fetch()))
        self.step = done
        step_var.assign(done)
        if manager is not None:
            manager.save(checkpoint_number=done)
        self._finish(self.model)

    # ---- all_reduce and local -----------------------------------------------------------
    def _train_synchronous(self) -> None:
        import tensorflow as tf

        if self.mode == ALL_REDUCE:
            assert self.task is not None
            # Peers open their ports inside the strategy's constructor: wait for names only.
            self._wait(["chief", "worker"], tcp=False)
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        else:
            self.strategy = tf.distribute.get_strategy()
        strategy = self.strategy
        with strategy.scope():
            self.model = self.build_model()
            self.optimizer = self.build_optimizer()
            self.optimizer.build(self.model.trainable_variables)
            step_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfk_step")
        checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer, step=step_var)
        ckpt_dir = self.flags.checkpoint_dir
        write_dir = ckpt_dir
        if ckpt_dir and not self.is_chief:
            # every MWMS worker must take part in saving; only the chief's copy is kept
            write_dir = os.path.join(ckpt_dir, ".tmp", f"{self.task.role}-{self.task.index}")  # type: ignore[union-attr]
        read_manager = self._checkpoint_manager(checkpoint, ckpt_dir)
        manager = read_manager if write_dir == ckpt_dir else self._checkpoint_manager(checkpoint, write_dir)
        self.step = self._restore(checkpoint, read_manager, step_var)
        total = self.flags.steps
        self.report(self.step, None, force=True)
        if self.mode == ALL_REDUCE:
            iterator = iter(strategy.distribute_datasets_from_function(self.dataset))
        else:
            iterator = iter(self.dataset(None))

        @tf.function
        def step_fn(it):
            per_replica = strategy.run(self.train_step, args=(next(it),))
            return strategy.reduce("MEAN", per_replica, axis=None)

        every_ckpt = self.flags.checkpoint_every
        while self.step < total:
            loss = step_fn(iterator)
            self.step += 1
            if self._reporter is not None and self._reporter.due(self.step):
                self.report(self.step, float(loss))
            if manager is not None and every_ckpt and self.step % every_ckpt == 0 and self.step < total:
                step_var.assign(self.step)
                manager.save(checkpoint_number=self.step)
        step_var.assign(self.step)
        if manager is not None:
            manager.save(checkpoint_number=self.step)
        if write_dir != ckpt_dir and write_dir:
            shutil.rmtree(write_dir, ignore_errors=True)
        self._finish(self.model)

    # ---- between_graph (TF1 style) ------------------------------------------------------
    def _train_between_graph(self) -> None:
        import tensorflow as tf

        info = self.task
        assert info is not None
        v1 = tf.compat.v1
        server = self._server()
        self._wait(["ps"])
        # replicas: the chief (if any) first, then the workers
        n_replicas = info.num("chief") + info.num("worker")
        replica_id = info.index + (info.num("chief") if info.role == "worker" else 0)
        is_chief = info.is_chief
        total = self.flags.steps
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
                features, labels = v1.data.make_one_shot_iterator(self.dataset(ctx)).get_next()
                self.model = model = self.build_model()
                outputs = model(features, training=True)
                loss = self.loss(labels, outputs)
                optimizer = self.build_v1_optimizer()
                hooks = [v1.train.StopAtStepHook(last_step=total)]
                train_op = optimizer.minimize(loss, global_step=global_step)
                with tf.control_dependencies([train_op]):
                    step_after = global_step.read_value()
                weights = [w.value if hasattr(w, "value") else w for w in model.weights]
            config = v1.ConfigProto(device_filters=["/job:ps", f"/job:{info.role}/task:{info.index}"])
            every_ckpt = self.flags.checkpoint_every
            if not is_chief:
                # A non-chief's session manager polls every 30 s for the chief to
                # initialise the variables: poll faster so the workers start together.
                deadline = time.monotonic() + self.flags.cluster_wait
                with v1.Session(server.target, config=config) as probe:
                    not_ready = v1.report_uninitialized_variables(v1.global_variables())
                    while len(probe.run(not_ready)):
                        if time.monotonic() > deadline:
                            raise _cluster.ClusterWaitTimeout(
                                f"the chief did not initialise the variables within "
                                f"{self.flags.cluster_wait:g}s"
                            )
                        time.sleep(0.5)
            with v1.train.MonitoredTrainingSession(
                master=server.target,
                is_chief=is_chief,
                checkpoint_dir=self.flags.checkpoint_dir,
                save_checkpoint_steps=(every_ckpt or None) if self.flags.checkpoint_dir else None,
                save_checkpoint_secs=None,
                save_summaries_steps=None,
                save_summaries_secs=None,
                log_step_count_steps=0,
                hooks=hooks,
                config=config,
            ) as sess:
                self.step = int(sess.run(global_step))
                self.report(self.step, None, force=True)
                while not sess.should_stop():
                    loss_value, step = sess.run([loss, step_after])
                    self.step = min(total, int(step))
                    self.report(self.step, float(loss_value))
            # The monitored session is closed; the variables live on the ps, so a plain
            # session reads the final global step (another worker may have taken the last
            # step) and, on the chief, the trained weights.
            with v1.Session(server.target, config=config) as plain:
                self.step = min(total, int(plain.run(global_step)))
                values = plain.run(weights) if is_chief else None
        if is_chief:
            fresh = self.build_model()
            fresh.set_weights(values)
            self._finish(fresh, fresh_copy=False)

    # ---- after training: evaluate and export --------------------------------------------
    def _finish(self, model, fresh_copy: bool = True) -> None:
        if not self.is_chief:
            return
        local = self._local_copy(model) if fresh_copy else model
        metrics = self.after_train(local)
        if metrics:
            print(_progress.event_line("metrics", **metrics), flush=True)
        self.export(local, metrics)

    def _local_copy(self, model):
        """A fresh, undistributed model with ``model``'s weights: what is exported."""
        fresh = self.build_model()
        if not fresh.built:
            sample = self.sample_input()
            if sample is not None:
                fresh(sample)
        fresh.set_weights(model.get_weights())
        return fresh

    def serving_input_signature(self, model) -> list:
        import tensorflow as tf

        sample = self.sample_input()
        if sample is not None:
            import numpy as np

            sample = np.asarray(sample)
            return [tf.TensorSpec([None, *sample.shape[1:]], tf.as_dtype(sample.dtype), name="inputs")]
        inputs = getattr(model, "inputs", None)
        if not inputs or len(inputs) != 1:
            raise UsageError(
                "cannot tell the serving input: define sample_input() or serving_input_signature()"
            )
        shape = list(inputs[0].shape)
        return [tf.TensorSpec([None, *shape[1:]], inputs[0].dtype, name="inputs")]

    def export(self, model, metrics: dict | None = None) -> str | None:
        """Write ``model`` as ``<export_dir>/<model_name>/<version>/`` with a
        ``serving_default`` signature and the sample request; returns the version dir.

        Written to a temporary sibling first and renamed, so TF Serving never sees a
        half-written version.
        """
        import numpy as np
        import tensorflow as tf

        base, name = self.flags.export_dir, self.flags.model_name or self.model_name
        if not base:
            _log("no export: neither --tfk_export_dir nor TFK_MODEL_DIR is set")
            return None
        model_dir = os.path.join(base, name)
        os.makedirs(model_dir, exist_ok=True)
        version = self.flags.model_version or next_version(model_dir)
        final = os.path.join(model_dir, str(version))
        if os.path.exists(final):
            raise UsageError(f"export: {final} already exists")
        tmp = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=model_dir)
        try:
            signature = self.serving_input_signature(model)

            def serving_fn(inputs):
                return self.serve(model, inputs)

            self._write_saved_model(model, serving_fn, signature, tmp)
            sample = self.sample_input()
            extra = os.path.join(tmp, "assets.extra")
            os.makedirs(extra, exist_ok=True)
            if sample is not None:
                sample = np.asarray(sample)
                with open(os.path.join(extra, SAMPLE_REQUEST), "w") as f:
                    json.dump({"instances": sample.tolist()}, f)
                # smoke test: the exported signature answers the sample request
                loaded = tf.saved_model.load(tmp)
                out = loaded.signatures["serving_default"](tf.constant(sample))
                if not out:
                    raise RuntimeError("export: serving_default returned nothing")
            if metrics:
                with open(os.path.join(extra, METRICS_FILE), "w") as f:
                    json.dump(metrics, f, default=str)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        print(_progress.event_line("export", path=final, model_name=name, version=version), flush=True)
        return final

    @staticmethod
    def _write_saved_model(model, serving_fn, signature, path: str) -> None:
        import tensorflow as tf

        try:
            from keras.export import ExportArchive
        except ImportError:  # pragma: no cover - Keras 2
            ExportArchive = None  # noqa: N806
        if ExportArchive is not None:
            archive = ExportArchive()
            archive.track(model)
            archive.add_endpoint(name="serving_default", fn=serving_fn, input_signature=signature)
            archive.write_out(path, verbose=False)
        else:  # pragma: no cover
            fn = tf.function(serving_fn, input_signature=signature)
            tf.saved_model.save(model, path, signatures={"serving_default": fn})


def _exit_code(exc: SystemExit) -> int:
    return exc.code if isinstance(exc.code, int) else EXIT_APP_ERROR


def _is_transient(exc: BaseException) -> bool:
    """Cluster trouble that a retry can fix."""
    if isinstance(exc, _cluster.ClusterWaitTimeout):
        return True
    try:
        import tensorflow as tf
    except ImportError:  # pragma: no cover
        return False
    return isinstance(
        exc,
        tf.errors.UnavailableError
        | tf.errors.AbortedError
        | tf.errors.DeadlineExceededError
        | tf.errors.CancelledError,
    )
