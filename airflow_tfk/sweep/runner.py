"""The sweep loop: start trials up to the concurrency limit, watch them, prune the losers.

Each trial is one cluster made through the lifecycle every operator uses
(:func:`~airflow_tfk.lifecycle.create_or_reattach`), owned by the sweep's task instance.
Its progress lines give the pruner its intermediate values; a pruned trial's cluster is
deleted at once with a reason and its exports set aside, as a killed run's are. The loop
itself enforces ``max_concurrent_trials``: a new trial starts only once another has ended.

A kill of the sweep (:meth:`SweepRunner.stop`, from ``on_kill`` or any exception)
deletes every trial cluster it started. The trials it interrupted fail in the study and
their parameters are queued again, so the retry runs them; one that a hard kill left
running in the study is treated the same way when the retry opens the study.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.ending import RunResult, end_run
from airflow_tfk.handle import ClusterHandle
from airflow_tfk.lifecycle import create_or_reattach
from airflow_tfk.naming import RunIdentity
from airflow_tfk.policies import Outcome, evaluate
from airflow_tfk.protocol.progress import Progress, parse_line
from airflow_tfk.spec import TFClusterSpec
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.config import Direction, SweepConfig
from airflow_tfk.sweep.trials import trial_name, trial_spec
from airflow_tfk.watch import progress_task

log = logging.getLogger(__name__)
Emit = Callable[[str], None]
#: Log lines read per look at a trial: enough for every progress line since the last look
#: at the default intervals, few enough to stay cheap on the API server.
PROGRESS_TAIL_LINES = 200
#: How long a kill waits for a trial the loop is already ending (reading its results,
#: deleting its cluster) before it deletes that cluster itself.
ENDING_WAIT_SECONDS = 30.0


class SweepStopped(RuntimeError):
    """The sweep was stopped (its task killed) while trials were running."""


@dataclass
class _Trial:
    """A running trial: its Optuna trial, cluster and what its progress said so far."""

    trial: Any  # optuna.trial.Trial
    handle: ClusterHandle
    role: str
    index: int
    last_step: int = 0
    smoothed: float | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def number(self) -> int:
        return int(self.trial.number)


@dataclass
class SweepResult:
    """What a sweep leaves: its study, the table of trials, the best completed one."""

    study_name: str
    storage: str
    objective: str
    direction: str
    trials: list[dict[str, Any]]
    best: dict[str, Any] | None
    peak_concurrency: int

    def to_xcom(self) -> dict[str, Any]:
        best = self.best or {}
        export = best.get("export") or {}
        return {
            "study_name": self.study_name,
            "storage": self.storage,
            "objective": self.objective,
            "direction": self.direction,
            "trials": self.trials,
            "best": self.best,
            "peak_concurrency": self.peak_concurrency,
            # what TFPublishModelOperator reads from an upstream training's XCom
            "export": export or None,
            "metrics": best.get("metrics"),
            "model_name": export.get("model_name"),
            "model_version": export.get("version"),
            "model_path": export.get("path"),
        }


class SweepRunner:
    """Run one sweep to its end (or resume it), on one backend.

    :param spec: the trials' common spec; trial N is named ``<base>-t<N>``.
    :param identity: the sweep's task instance: every trial cluster is its own.
    :param storage: the study's database URL (:func:`~airflow_tfk.sweep.study.storage_url`).
    """

    def __init__(
        self,
        backend: Backend,
        spec: TFClusterSpec,
        identity: RunIdentity | None,
        config: SweepConfig,
        *,
        base: str,
        study_name: str,
        storage: str,
        emit: Emit = log.info,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.identity = identity
        self.config = config
        self.base = base
        self.study_name = study_name
        self.storage = storage
        self.emit = emit
        self._sleep = sleep
        self._running: dict[int, _Trial] = {}
        # Trials whose end the loop has claimed (complete, fail, prune) and is carrying out.
        # Each trial is ended by exactly one path: the loop's claim or stop()'s, never both.
        self._ending: dict[int, _Trial] = {}
        self._lock = threading.RLock()
        self._ended = threading.Condition(self._lock)
        self._stopping: str | None = None
        self.peak_concurrency = 0
        self._study: Any = None
        self._loop_thread: threading.Thread | None = None

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> SweepResult:
        self._loop_thread = threading.current_thread()
        self._study = study = studies.open_study(self.config, self.storage, self.study_name)
        self.emit(
            f"sweep {self.study_name}: {self.config.n_trials} trials, at most "
            f"{self.config.max_concurrent_trials} at once, {self.config.direction.value} "
            f"{self.config.objective}; study in {self.storage}"
        )
        try:
            self._recover(study)
            self._loop(study)
        except BaseException:
            self.stop("the sweep stopped before its trials finished")
            raise
        return self.result()

    def _loop(self, study: Any) -> None:
        distributions = studies.distributions(self.config)
        while True:
            self._raise_if_stopped()
            finished = sum(studies.counted(t) for t in study.get_trials(deepcopy=False))
            while (
                len(self._running) < self.config.max_concurrent_trials
                and finished + len(self._running) < self.config.n_trials
                and not self._stopping
            ):
                self._start(study, distributions)
            # A stop empties the running trials: that is not the end of the sweep.
            self._raise_if_stopped()
            if not self._running:
                return
            self._sleep(self.config.poll_interval)
            for run in list(self._running.values()):
                self._poll(study, run)

    def _raise_if_stopped(self) -> None:
        if self._stopping:
            raise SweepStopped(f"sweep {self.study_name} stopped: {self._stopping}")

    def _start(self, study: Any, distributions: dict[str, Any]) -> None:
        trial = study.ask(distributions)
        base_version = study.user_attrs.get(studies.VERSION_BASE)
        version = int(base_version) + trial.number if self.config.model_versions else None
        name = trial_name(self.base, trial.number)
        try:
            spec = trial_spec(self.spec, name, trial.number, trial.params, version)
        except Exception as exc:
            # A spec every trial shares: the next trial would fail the same way.
            self.emit(f"trial {trial.number} ({_params(trial.params)}): invalid trial spec: {exc}")
            study.tell(trial, state=_state("FAIL"))
            raise
        handle = ClusterHandle.for_spec(spec, self.backend, self.identity)
        role, index = progress_task(spec.mode, handle.replicas)
        run = _Trial(trial, handle, role, index)
        trial.set_user_attr(studies.CLUSTER, name)
        if version is not None:
            trial.set_user_attr(studies.MODEL_VERSION, version)
        with self._lock:
            # Registered before the create: a stop during the create deletes it too.
            self._running[trial.number] = run
            self.peak_concurrency = max(self.peak_concurrency, len(self._running))
        self.emit(f"trial {trial.number}: {_params(trial.params)} -> cluster {name}")
        create_or_reattach(self.backend, spec, self.identity, self.emit)
        if self._stopping:  # stopped while creating: what the create made goes too
            self._end(run, f"the sweep was stopped: {self._stopping}")

    def _poll(self, study: Any, run: _Trial) -> None:
        try:
            status = self.backend.status(run.handle.ref)
        except Exception as exc:  # a transient read error: look again next round
            self.emit(f"trial {run.number}: could not read the status of {run.handle.ref.name}: {exc}")
            return
        verdict = evaluate(run.handle.mode, run.handle.replicas, status)
        prune_at = self._report(run)
        if verdict.outcome is Outcome.RUNNING and prune_at is None:
            return
        if not self._claim(run):  # stop() took it first: it is interrupted, not finished
            return
        try:
            if verdict.outcome is Outcome.RUNNING:
                self._prune(study, run, prune_at or run.last_step)
            elif verdict.outcome is Outcome.SUCCEEDED:
                self._complete(study, run)
            else:
                self._fail(study, run, verdict.message)
        except BaseException:
            # Cut short (an execution_timeout's signal, an error): the end did not happen,
            # so the trial is running again for stop(), which ends and requeues it.
            self._release(run, unfinished=True)
            raise
        self._release(run)

    # -- progress and pruning -------------------------------------------------------------
    def _report(self, run: _Trial) -> int | None:
        """Report the progress lines that are new since the last look to Optuna; the step
        at which the pruner says to stop, or None."""
        try:
            text = self.backend.logs(run.handle.ref, run.role, run.index, tail_lines=PROGRESS_TAIL_LINES)
        except Exception:  # progress is best effort; the status decides
            return None
        moved = False
        for p in map(parse_line, text.splitlines()):
            # The last step comes twice (running, then done): Optuna takes one value a step.
            if p is not None and p.step > run.last_step:
                self._intermediate(run, p)
                run.last_step = p.step
                moved = True
        if not moved:
            return None
        run.trial.set_user_attr(studies.STEPS, run.last_step)
        if run.smoothed is not None and run.trial.should_prune():
            return run.last_step
        return None

    def _intermediate(self, run: _Trial, p: Progress) -> None:
        if p.loss is None or not math.isfinite(p.loss):
            return
        a = self.config.smoothing
        run.smoothed = p.loss if run.smoothed is None else a * p.loss + (1 - a) * run.smoothed
        # The pruner compares intermediate values in the study's direction.
        sign = -1.0 if self.config.direction is Direction.MAXIMIZE else 1.0
        run.trial.report(sign * run.smoothed, p.step)

    def _prune(self, study: Any, run: _Trial, step: int) -> None:
        reason = f"pruned by the sweep at step {step}: loss {run.smoothed:.4g} is behind the finished trials"
        self.emit(f"trial {run.number}: {reason}")
        self._end(run, f"trial {run.number} {reason}")
        run.trial.set_user_attr(studies.PRUNED_AT, step)
        study.tell(run.trial, state=_state("PRUNED"))

    # -- the ends of a trial ------------------------------------------------------------
    def _complete(self, study: Any, run: _Trial) -> None:
        from airflow_tfk.training_results import collect_results

        handle = run.handle
        results = collect_results(
            self.backend, handle.ref, handle.replicas, evaluator_wait=float(handle.ps_grace_seconds)
        )
        value = _objective(self.config.objective, results.metrics, results.eval_metrics)
        run.trial.set_user_attr(studies.METRICS, results.metrics)
        if results.export:
            run.trial.set_user_attr(studies.EXPORT, results.export)
        # The roles that never exit (PS, workers of parameter_server) go with the rest;
        # collect_results gave the evaluator its grace already.
        end_run(
            handle,
            f"trial {run.number} of sweep {self.study_name} finished",
            result=RunResult.ACCEPTED,
            emit=self.emit,
            grace_seconds=0,
            log_lines=0,
        )
        if value is None:
            error = f"the training succeeded but reported no finite {self.config.objective!r}"
            run.trial.set_user_attr(studies.ERROR, error)
            self.emit(f"trial {run.number}: {error} (metrics {results.metrics})")
            study.tell(run.trial, state=_state("FAIL"))
        else:
            self.emit(
                f"trial {run.number}: completed at step {run.last_step}, {self.config.objective} {value:.6g}"
            )
            study.tell(run.trial, value)

    def _fail(self, study: Any, run: _Trial, message: str) -> None:
        self.emit(f"trial {run.number} failed: {message}")
        run.trial.set_user_attr(studies.ERROR, message[:500])
        end_run(run.handle, f"trial {run.number} of sweep {self.study_name} failed", emit=self.emit)
        study.tell(run.trial, state=_state("FAIL"))

    def _end(self, run: _Trial, reason: str) -> None:
        """End a trial's cluster that has not finished (pruned, interrupted): a rejected
        run, so its exports (if any) are set aside and nothing of it can be published."""
        end_run(run.handle, reason, emit=self.emit, log_lines=0)

    def _claim(self, run: _Trial) -> bool:
        """Take the end of a running trial for the loop; False when stop() took it."""
        with self._lock:
            if self._running.pop(run.number, None) is None:
                return False
            self._ending[run.number] = run
            return True

    def _release(self, run: _Trial, *, unfinished: bool = False) -> None:
        with self._lock:
            self._ending.pop(run.number, None)
            if unfinished:
                self._running[run.number] = run
            self._ended.notify_all()

    # -- kill and resume ------------------------------------------------------------------
    def stop(self, reason: str) -> list[str]:
        """Delete every running trial's cluster (``on_kill``, a timeout, any error); the
        trials fail in the study and their parameters are queued for the retry. Returns
        the clusters deleted. Safe to call twice and from another thread."""
        with self._lock:
            self._stopping = self._stopping or reason
            runs = list(self._running.values())
            self._running.clear()
        ended = []
        self._await_claimed_ends()
        for run in runs:
            try:
                self._end(run, f"sweep {self.study_name}: {reason}")
                ended.append(run.handle.ref.name)
            except Exception:
                log.exception("could not delete trial cluster %s", run.handle.ref.name)
                self.emit(
                    f"could not delete trial cluster {run.handle.ref.name}; delete it by label "
                    f"{run.handle.ref.label_selector}"
                )
        for run in runs:
            self._requeue(run.trial.number, getattr(run.trial, "_trial_id", None), dict(run.trial.params))
        return ended

    def _await_claimed_ends(self) -> None:
        """Let the ends the loop already claimed (a trial completing as the kill comes)
        finish, so the kill returns with nothing left; past the bound, delete them here
        (a delete is idempotent) and let the loop record them."""
        deadline = time.monotonic() + ENDING_WAIT_SECONDS
        with self._lock:
            if threading.current_thread() is self._loop_thread:
                return  # stop() from the loop itself: nothing of its own is half-ended
            while self._ending and time.monotonic() < deadline:
                self._ended.wait(max(0.0, deadline - time.monotonic()))
            late = list(self._ending.values())
        for run in late:
            try:
                # The loop's claim decides what the trial's exports are worth, not this.
                end_run(
                    run.handle,
                    f"sweep {self.study_name}: {self._stopping}",
                    result=RunResult.UNDECIDED,
                    emit=self.emit,
                )
            except Exception:
                log.exception("could not delete trial cluster %s", run.handle.ref.name)

    def _requeue(self, number: int, trial_id: int | None, params: dict[str, Any]) -> None:
        """Fail an interrupted trial and queue its parameters again (best effort: the
        retry's :meth:`_recover` does it for what a hard kill left)."""
        study = self._study
        if study is None or trial_id is None:
            return
        try:
            import optuna

            if study._storage.get_trial(trial_id).state.is_finished():
                return  # it ended on its own (completed, failed, pruned): nothing to rerun
            trial = optuna.trial.Trial(study, trial_id)
            trial.set_user_attr(studies.INTERRUPTED, True)
            study.tell(number, state=_state("FAIL"), skip_if_finished=True)
            study.enqueue_trial(params, user_attrs={studies.RERUN_OF: number})
            self.emit(f"trial {number} interrupted: its parameters are queued to run again")
        except Exception as exc:
            self.emit(f"trial {number}: could not record the interruption ({exc}); the retry will")

    def _recover(self, study: Any) -> None:
        """Trials a previous try left running (a hard kill): end their clusters if any
        are left, then fail and requeue them."""
        import optuna

        stale = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        if not stale:
            done = sum(studies.counted(t) for t in study.get_trials(deepcopy=False))
            if done:
                self.emit(f"resuming sweep {self.study_name}: {done} trials already finished")
            return
        for frozen in stale:
            name = frozen.user_attrs.get(studies.CLUSTER)
            if name:
                ref = ClusterRef(name, self.spec.namespace_name)
                handle = ClusterHandle.for_spec(self.spec.with_name(name), self.backend, self.identity)
                if self.backend.exists(ref):
                    self._end(
                        _Trial(frozen, handle, "worker", 0), "left running by a previous try of the sweep"
                    )
            self._requeue(frozen.number, frozen._trial_id, dict(frozen.params))
        self.emit(f"resuming sweep {self.study_name}: {len(stale)} interrupted trials run again")

    def result(self) -> SweepResult:
        import optuna

        study = self._study
        best: dict[str, Any] | None = None
        frozen = {t.number: t for t in study.get_trials(deepcopy=False)}
        rows = [
            studies.trial_row(t) for t in frozen.values() if t.state is not optuna.trial.TrialState.WAITING
        ]
        best_row = studies.best_row(rows, self.config.direction)
        if best_row is not None:
            attrs = frozen[best_row["number"]].user_attrs
            best = {
                **best_row,
                "metrics": attrs.get(studies.METRICS),
                "export": attrs.get(studies.EXPORT),
            }
        return SweepResult(
            self.study_name,
            self.storage,
            self.config.objective,
            self.config.direction.value,
            rows,
            best,
            self.peak_concurrency,
        )


def _state(name: str) -> Any:
    import optuna

    return optuna.trial.TrialState[name]


def _objective(
    name: str, metrics: dict[str, Any] | None, eval_metrics: dict[str, Any] | None
) -> float | None:
    for source in (metrics, eval_metrics):
        value = (source or {}).get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
