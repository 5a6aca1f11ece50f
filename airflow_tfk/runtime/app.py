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
  ps serve forever; asynchronous, or synchronous with ``--tfk_sync``
  (``SyncReplicasOptimizer``, its end-of-training deadlock designed out: see
  :mod:`.between_graph`). A chief task, if the cluster has one, trains as the chief replica.
- no cluster at all: a single local process (for developing an app).

An ``evaluator`` task evaluates each new checkpoint (:mod:`.evaluator`).

Hooks to override: :meth:`build_model`, :meth:`dataset`, :meth:`loss` (or
:meth:`train_step` for a custom step), :meth:`build_optimizer`, :meth:`evaluate` (or
:meth:`eval_dataset`), :meth:`after_train`, :meth:`sample_input`, :meth:`serve`,
:meth:`add_arguments`; :meth:`train` replaces the whole loop (then call :meth:`report`
for progress). The loops live in :mod:`.loops` and :mod:`.between_graph`, the export in
:mod:`.export`; the full reference is ``docs/training-app.md``.

Exit codes: 0 done; 1 error in the app (permanent); 2 bad flags or cluster environment
(permanent); 75 transient cluster failure (unreachable task, aborted session: retry); 76
stopped on notice after a checkpoint (SIGTERM: preemption, eviction, drain; restarted
without counting as a failure, see :mod:`.notice`).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from airflow_tfk.runtime import cluster as _cluster
from airflow_tfk.runtime import notice as _notice
from airflow_tfk.runtime.app_cluster import ClusterTask
from airflow_tfk.runtime.app_finish import FinishSteps
from airflow_tfk.runtime.exits import (
    EXIT_APP_ERROR,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_RETRYABLE,
    EXIT_USAGE,
    UsageError,
    exit_code,
    is_transient,
    log,
)
from airflow_tfk.runtime.export import METRICS_FILE, SAMPLE_REQUEST, next_version
from airflow_tfk.runtime.flags import PlatformFlags, add_platform_flags
from airflow_tfk.runtime.loops import (
    ALL_REDUCE,
    BETWEEN_GRAPH,
    LOCAL,
    PARAMETER_SERVER,
)
from airflow_tfk.runtime.reporter import Reporter

__all__ = [
    "ALL_REDUCE",
    "BETWEEN_GRAPH",
    "EXIT_APP_ERROR",
    "EXIT_OK",
    "EXIT_PREEMPTED",
    "EXIT_RETRYABLE",
    "EXIT_USAGE",
    "LOCAL",
    "METRICS_FILE",
    "MODES",
    "PARAMETER_SERVER",
    "SAMPLE_REQUEST",
    "TrainingApp",
    "UsageError",
    "infer_mode",
    "next_version",
]

MODES = (PARAMETER_SERVER, ALL_REDUCE, BETWEEN_GRAPH)


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


class TrainingApp(ClusterTask, FinishSteps):
    """Subclass, override the hooks, and call ``MyApp.main()``."""

    #: model name under the export base, unless ``--tfk_model_name`` says otherwise
    model_name: str = "model"
    #: default learning rate of the default optimizers (``--tfk_learning_rate`` overrides)
    learning_rate: float = 0.001
    #: description in ``--help``
    description: str | None = None
    #: take SIGTERM as a notice (checkpoint at the next step, exit 76, be restarted).
    #: None: only when the platform's loop runs; an app that overrides :meth:`train`
    #: sets True and calls :meth:`stop_on_notice` between its steps.
    checkpoint_on_notice: bool | None = None

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
        #: SIGTERM as a notice (set on the tasks that train; see :mod:`.notice`)
        self.notice: _notice.Notice | None = None
        #: the previous attempt's stop, until this attempt has trained a step again
        self.recovery: _notice.Recovery | None = None
        self._reporter: Reporter | None = None
        #: what must outlive the training loop (ended with the process)
        self.keep_alive: Any = None
        self._stop_recorded = False

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
            from airflow_tfk.runtime.loops import train_parameter_server

            train_parameter_server(self)
        elif self.mode == BETWEEN_GRAPH:
            from airflow_tfk.runtime.between_graph import train_between_graph

            train_between_graph(self)
        else:
            from airflow_tfk.runtime.loops import train_synchronous

            train_synchronous(self)

    def after_train(self, model) -> dict | None:
        """Evaluate; return metrics (JSON-serialisable) or None.

        Runs on the exporting task only (the chief, or worker 0), with a plain local
        Keras model holding the trained weights (the one that is exported). The metrics
        are printed as a ``metrics`` line (the provider puts them in XCom) and saved
        with the export. The default returns :meth:`evaluate`'s metrics.
        """
        return self.evaluate(model)

    def eval_dataset(self):
        """Held-out data for the default :meth:`evaluate`: a finite ``tf.data.Dataset`` of
        ``(features, labels)`` batches, or None (the default)."""
        return None

    def evaluate(self, model) -> dict | None:
        """Metrics of ``model`` (a plain local Keras model) on held-out data, or None.

        The evaluator role calls it for every new checkpoint. The default computes the
        mean :meth:`loss` over :meth:`eval_dataset` (``{"loss": ..., "rows": ...}``).
        """
        dataset = self.eval_dataset()
        if dataset is None:
            return None
        total, rows = 0.0, 0
        for features, labels in dataset:
            n = int(labels.shape[0])
            total += float(self.loss(labels, model(features, training=False))) * n
            rows += n
        return {"loss": total / rows if rows else float("nan"), "rows": rows}

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
        recovery = self.recovery
        if recovery is not None and recovery.resumed_step is not None and step > recovery.resumed_step:
            if recovery.trained_at is None:
                recovery.trained(step)
            elif not recovery.settling():
                self.recovery = None
        if self._reporter is not None:
            self._reporter.report(step, loss, force=force)

    def resumed(self, step: int) -> None:
        """The loop starts at ``step`` (restored, or read from the ps): state what the
        previous attempt of this task lost, if it left a record."""
        self.recovery = _notice.take_record(self.flags.checkpoint_dir, self.task_name)
        if self.recovery is not None:
            self.recovery.resumed(step)
        elif step:
            log(f"resumed at step {step} (the previous attempt left no record of its last step)")

    @property
    def task_name(self) -> str:
        return "local" if self.task is None else f"{self.task.role}-{self.task.index}"

    def stop_on_notice(self, save: Any = None) -> None:
        """Between two steps: when a notice came, ``save()`` (if given) and raise
        :class:`~.notice.Preempted`. Cheap enough to call at every step."""
        if self.notice is None or not self.notice.received:
            return
        if save is not None:
            save()
            log(f"checkpoint saved on notice at step {self.step}")
        raise _notice.Preempted(self.step, save is not None)

    def progress_due(self, step: int) -> bool:
        """Would :meth:`report` print a line at ``step``? (Saves fetching a loss.)"""
        return self._reporter is not None and self._reporter.due(step)

    # ==== entry points ====================================================================
    @classmethod
    def main(cls, argv: Sequence[str] | None = None) -> None:
        """Run the app and exit with its exit code."""
        app = cls()
        code = app.run(argv)
        if code == EXIT_PREEMPTED and app.notice is not None and app.notice.received:
            # Stopped on notice: the checkpoint (if any), the stop record and the last
            # progress line are written. The interpreter's teardown would join what is
            # still waiting on peers that may be gone (a parameter_server chief's
            # ClusterCoordinator retries a deleted cluster's workers for up to an hour;
            # measured 2.4 s of teardown on a deleted local cluster): end here.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        if app.mode == ALL_REDUCE:
            # A MultiWorkerMirroredStrategy task ends without the interpreter's teardown:
            # a normal exit spends 6-7 s per task collecting TensorFlow's objects, and
            # parts of it talk to peers that may be gone (PreemptionCheckpointHandler's
            # __del__ writes to the coordination service and joins its threads without a
            # timeout). Nothing is owed by now (export, metrics, progress lines flushed).
            # Figures and what is known: docs/training-app.md, "How an all_reduce task ends".
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        sys.exit(code)

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
            log(f"error: {exc}")
            return EXIT_USAGE
        where = "local" if self.task is None else f"{self.task.role}:{self.task.index}"
        log(f"{type(self).__name__}: mode {self.mode}, task {where}")
        try:
            return self._run_task()
        finally:  # the process may go on (an app run in-process): leave no handler behind
            if self.notice is not None:
                self.notice.uninstall()

    def _run_task(self) -> int:
        try:
            self._configure_tensorflow()
            return self._dispatch()
        except _notice.Preempted as exc:
            return self._stopped_on_notice(str(exc))
        except UsageError as exc:
            log(f"error: {exc}")
            self._final_progress("failed")
            return EXIT_USAGE
        except BaseException as exc:  # noqa: B036 - report every way of dying
            if self.notice is not None and self.notice.received and is_transient(exc):
                # After a SIGTERM, a peer that is gone is the stop itself (a deleted
                # cluster's tasks all get one), not a failure to report with a traceback.
                first = _first_line(exc)
                log(f"on notice: a peer is gone ({type(exc).__name__}: {first}); no checkpoint")
                return self._stopped_on_notice(f"stopped on notice at step {self.step}")
            recovery = self.recovery
            if (
                is_transient(exc)
                and recovery is not None
                and recovery.why == "notice"
                and recovery.settling()
            ):
                return self._aftermath_of_notice(exc)
            traceback.print_exc()
            self._final_progress("failed")
            self._record_stop("error")
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                return 130 if isinstance(exc, KeyboardInterrupt) else exit_code(exc)
            return EXIT_RETRYABLE if is_transient(exc) else EXIT_APP_ERROR

    # ==== platform internals ==============================================================
    def _aftermath_of_notice(self, exc: BaseException) -> int:
        """A transient TensorFlow error in the first moments of an attempt that resumed
        after a stop on notice (``Recovery.SETTLING_SECONDS``): what a preemption leaves
        behind (a ps reconnecting to the restarted task's address, whose retried call
        reaches it twice: ``ABORTED: The same RunGraph request was received twice``),
        not a failure of the training. Exits 76, restarted without counting a retry;
        recorded as an error, so the attempt after it gets no second pass."""
        first = _first_line(exc)
        log(
            f"a transient error right after a restart on notice "
            f"({type(exc).__name__}: {first}): exiting with {EXIT_PREEMPTED} to be restarted once more"
        )
        self._final_progress("failed")
        self._record_stop("error")
        return EXIT_PREEMPTED

    def _stopped_on_notice(self, what: str) -> int:
        log(f"{what}: exiting with {EXIT_PREEMPTED} to be restarted")
        self._record_stop("notice")
        self._final_progress("failed")
        if self._reporter is not None:
            self._reporter.close()  # the summaries written so far reach the disk
        return EXIT_PREEMPTED

    def _peers_gone(self) -> Any:
        """What the notice's watchdog asks: are the tasks this one's steps wait on gone for
        good? The ps, in the modes that have them; and every worker, for a
        parameter_server chief (its steps run there). None: nothing to watch."""
        if self.task is None or self.mode not in (PARAMETER_SERVER, BETWEEN_GRAPH):
            return None
        watch = _cluster.PeerWatch(self.task, workers=self.mode == PARAMETER_SERVER)
        return watch.gone if watch else None

    def _on_notice_expiry(self) -> None:
        """The notice's watchdog is about to end the process (from its own thread)."""
        if not self._stop_recorded:
            self._record_stop("notice")
            self._final_progress("failed")

    def _record_stop(self, why: str) -> None:
        self._stop_recorded = True
        if self._reporter is not None:  # only tasks that train have steps to lose
            at = self.notice.at if why == "notice" and self.notice is not None else None
            _notice.record_stop(self.flags.checkpoint_dir, self.task_name, self.step, at, why)

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

    def _dispatch(self) -> int:
        role = self.task.role if self.task else None
        if role == "evaluator":
            from airflow_tfk.runtime.evaluator import run_evaluator

            run_evaluator(self)
            return EXIT_OK
        if self.mode in (PARAMETER_SERVER, BETWEEN_GRAPH) and (
            role == "ps" or (self.mode == PARAMETER_SERVER and role == "worker")
        ):
            self._serve_forever()
            return EXIT_OK  # not reached
        self._reporter = Reporter(
            self.flags.steps,
            self.flags.progress_every,
            enabled=True,
            log_dir=self._summary_dir(),
            metrics=self._metrics(),
        )
        on_notice = self.flags.checkpoint_on_notice
        if on_notice is None:
            on_notice = self.checkpoint_on_notice
        if on_notice is None:
            on_notice = type(self).train is TrainingApp.train
        if on_notice:
            self.notice = _notice.Notice(on_expiry=self._on_notice_expiry, peers_gone=self._peers_gone())
            self.notice.install()
        self.train()
        if self.notice is not None:  # trained: a SIGTERM from now on ends the task at once
            self.notice.uninstall()
        self._reporter.report(self.step, None, status="done", force=True)
        self._reporter.close()
        return EXIT_OK


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message, at most 200 characters, for a one-line log."""
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""
