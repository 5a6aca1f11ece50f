"""The sweep loop: start trials up to the concurrency limit, watch them, prune the losers.

Each trial is one cluster made through the lifecycle every operator uses
(:func:`~airflow_tfk.run.lifecycle.create_or_reattach`), owned by the sweep's task instance.
The loop itself enforces ``max_concurrent_trials``: a new trial starts only once another
trial's cluster is gone.

The loop starts trials and ends the ones whose clusters finished (complete, fail); the
judge (:mod:`~airflow_tfk.sweep.judge`), a thread of its own, prunes the losers.

A kill of the sweep (:meth:`SweepRunner.stop`, from ``on_kill`` or any exception)
deletes every trial cluster it started. The trials it interrupted fail in the study and
their parameters are queued again, so the retry runs them; one that a hard kill left
running in the study is treated the same way when the retry opens the study.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_tfk.backends.base import Backend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.ending import RunResult, end_run
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.run.lifecycle import create_or_reattach
from airflow_tfk.run.policies import Outcome, evaluate
from airflow_tfk.run.wait import progress_task
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.config import Direction, PrunerKind, SweepConfig
from airflow_tfk.sweep.distinct import exhausted
from airflow_tfk.sweep.judge import Judging, _Trial
from airflow_tfk.sweep.owner import StudyOwnership, SweepOwner
from airflow_tfk.sweep.result import SweepResult, objective_value, params_text, study_result
from airflow_tfk.sweep.resume import Resuming
from airflow_tfk.sweep.trials import trial_name, trial_spec

__all__ = ["SweepResult", "SweepRunner", "SweepStopped", "_Trial"]

log = logging.getLogger(__name__)
Emit = Callable[[str], None]
#: How long a kill waits for a trial another thread is already ending (reading its
#: results, deleting its cluster) before it deletes that cluster itself.
ENDING_WAIT_SECONDS = 30.0


class SweepStopped(RuntimeError):
    """The sweep was stopped (its task killed) while trials were running."""


class SweepRunner(Judging, Resuming):
    """Run one sweep to its end (or resume it), on one backend.

    :param spec: the trials' common spec; trial N is named ``<base>-t<N>``.
    :param identity: the sweep's task instance: every trial cluster is its own.
    :param storage: the study's database URL (:func:`~airflow_tfk.sweep.study.storage_url`).
    :param try_number: the task instance's try: a later try takes the study over from an
        earlier one, never the reverse (:mod:`~airflow_tfk.sweep.owner`).
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
        try_number: int | None = None,
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
        # Trials whose end a thread (the loop, the judge) has claimed and is carrying out.
        # Each trial is ended by exactly one path: a claim or stop()'s, never both.
        self._ending: dict[int, _Trial] = {}
        self._lock = threading.RLock()
        self._ended = threading.Condition(self._lock)
        self._stopping: str | None = None
        self._done = threading.Event()
        self.peak_concurrency = 0
        #: The size of the search space once the study holds every point of it.
        self.exhausted: int | None = None
        self.over_budget = False  # the budget stopped the starts (said once)
        self._study: Any = None
        self.try_number = try_number
        self._owner: StudyOwnership | None = None
        self._sign = -1.0 if config.direction is Direction.MAXIMIZE else 1.0

    # -- the loop -------------------------------------------------------------------------
    @property
    def study(self) -> Any:
        """The Optuna study, once :meth:`run` opened it."""
        return self._study

    def run(self) -> SweepResult:
        self._study = study = studies.open_study(self.config, self.storage, self.study_name)
        # Owned before anything of the study is read as this sweep's: another sweep's
        # running trials would look like a dead try's.
        self._owner = owner = StudyOwnership(
            study, SweepOwner.of(self.identity, self.try_number), self.study_name, self.storage
        )
        taken = owner.claim()
        if taken:
            self.emit(f"sweep {self.study_name}: study taken over from {taken}")
        owner.start()
        self.emit(
            f"sweep {self.study_name}: {self.config.n_trials} trials, at most "
            f"{self.config.max_concurrent_trials} at once, {self.config.direction.value} "
            f"{self.config.objective}; study in {self.storage}"
        )
        judge = None
        if self.config.pruner.name is not PrunerKind.NONE:
            judge = threading.Thread(target=self._judge_loop, args=(study,), name="sweep-judge", daemon=True)
        try:
            self._recover(study)
            if judge is not None:
                judge.start()
            self._loop(study)
        except BaseException:
            self.stop("the sweep stopped before its trials finished")
            raise
        finally:
            self._done.set()
            if judge is not None and judge.is_alive():
                judge.join(ENDING_WAIT_SECONDS)
            owner.end()  # released, whatever the end: a retry claims it again
        return self.result()

    def _loop(self, study: Any) -> None:
        distributions = studies.distributions(self.config)
        while True:
            self._raise_if_stopped()
            self._check_owner()
            self._fill_slots(study, distributions)
            # A stop empties the running trials: that is not the end of the sweep. Read
            # both under the lock a stop holds, so no stop can land between them.
            with self._lock:
                self._raise_if_stopped()
                if not self._busy():
                    return
            self._sleep(self.config.poll_interval)
            for run in list(self._running.values()):
                self._poll(study, run)

    def _fill_slots(self, study: Any, distributions: dict[str, Any]) -> None:
        """Start trials while a slot is free and the sweep needs more."""
        # The trials alive are counted before the finished ones: a trial whose end (told
        # to the study, then released) lands between the two reads is then counted twice
        # - one start fewer this round - and never not at all, which would start a trial
        # past n_trials.
        busy = self._busy()
        if busy >= self.config.max_concurrent_trials:
            return
        # Read only when a slot is free: the study holds every trial's curve.
        trials = study.get_trials(deepcopy=False)
        finished = sum(studies.counted(t) for t in trials)
        while (
            busy < self.config.max_concurrent_trials
            and finished + busy < self.config.n_trials
            and not self._stopping
            and not self._space_exhausted(study, finished + busy)
            and not self._over_budget(trials, busy)
        ):
            self._check_owner(renew=True)
            self._start(study, distributions)
            busy += 1

    def _check_owner(self, *, renew: bool = False) -> None:
        """Stop when another sweep took the study over (a later try of this task). Before a
        trial starts the claim is renewed, so no trial starts past a takeover; between
        starts the renewal thread's word is enough."""
        owner = self._owner
        if owner is not None and (not owner.renew() if renew else owner.lost is not None):
            raise SweepStopped(f"sweep {self.study_name}: its study was taken over by {owner.lost}")

    def _over_budget(self, trials: list[Any], busy: int) -> bool:
        """Would the next trial cross ``budget_core_hours``? What the ended trials held,
        plus a completed trial's mean for each running one and for the next (None before
        a trial has completed: nothing to go by, so it starts). Said once."""
        budget = self.config.budget_core_hours
        if budget is None:
            return False
        held = [studies.trial_core_seconds(t) for t in trials]
        ended = sum(h for h in held if h is not None)
        complete = [
            h for t, h in zip(trials, held, strict=True) if h is not None and t.state.name == "COMPLETE"
        ]
        if not complete:
            return False
        mean = sum(complete) / len(complete)
        projected = ended + (busy + 1) * mean
        if projected <= budget * 3600:
            return False
        if not self.over_budget:
            self.over_budget = True
            self.emit(
                f"sweep {self.study_name}: the next trial would cross its budget of {budget:g} core-hours "
                f"(held {ended / 3600:.4f}, {busy} running and the next about {mean / 3600:.4f} each): "
                "no more trials start"
            )
        return True

    def _space_exhausted(self, study: Any, taken: int) -> bool:
        """Does the study hold every point of the search space? Then no trial is asked
        for: it could only train a point again. Said once."""
        size = exhausted(study, self.config)  # a trial that fails frees its point again
        if size is not None and self.exhausted is None:
            self.exhausted = size
            self.emit(
                f"sweep {self.study_name}: the search space is exhausted: the study holds all "
                f"{size} of its points, so no trial starts past the {taken} counted "
                f"(n_trials={self.config.n_trials})"
            )
        return size is not None

    def _busy(self) -> int:
        """Trial clusters alive: running, or being ended by a thread."""
        with self._lock:
            return len(self._running) + len(self._ending)

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
            self.emit(f"trial {trial.number} ({params_text(trial.params)}): invalid trial spec: {exc}")
            study.tell(trial, state=_state("FAIL"))
            raise
        handle = ClusterHandle.for_spec(spec, self.backend, self.identity)
        role, index = progress_task(spec.mode, handle.replicas)
        run = _Trial(trial, handle, role, index, self._curve())
        trial.set_user_attr(studies.CLUSTER, name)
        if version is not None:
            trial.set_user_attr(studies.MODEL_VERSION, version)
        with self._lock:
            # A stop that came since the loop decided to start this trial has returned
            # already: nothing may be created after it. Otherwise registered before the
            # create, so a stop during the create deletes it too.
            stopped = bool(self._stopping)
            if not stopped:
                run.creating = threading.current_thread()
                self._running[trial.number] = run
                self.peak_concurrency = max(self.peak_concurrency, self._busy())
        if stopped:
            self._requeue(trial.number, getattr(trial, "_trial_id", None), dict(trial.params))
            self._raise_if_stopped()
        self.emit(f"trial {trial.number}: {params_text(trial.params)} -> cluster {name}")
        try:
            create_or_reattach(self.backend, spec, self.identity, self.emit)
        finally:
            run.creating = None
        if self._stopping:  # stopped while creating: what the create made goes too
            self._end(run, f"the sweep was stopped: {self._stopping}")

    def _poll(self, study: Any, run: _Trial) -> None:
        """End the trial if its cluster finished (the judge prunes)."""
        try:
            status = self.backend.status(run.handle.ref)
        except Exception as exc:  # a transient read error: look again next round
            self.emit(f"trial {run.number}: could not read the status of {run.handle.ref.name}: {exc}")
            return
        verdict = evaluate(run.handle.mode, run.handle.replicas, status)
        if verdict.outcome is Outcome.RUNNING:
            return
        with run.lock:
            if not self._claim(run):  # pruned, or stop() took it: not the loop's to end
                return
        try:
            if verdict.outcome is Outcome.SUCCEEDED:
                self._complete(study, run)
            else:
                self._fail(study, run, verdict.message)
        except BaseException:
            # Cut short (an execution_timeout's signal, an error): the end did not happen,
            # so the trial is running again for stop(), which ends and requeues it.
            self._release(run, unfinished=True)
            raise
        self._release(run)

    # -- the ends of a trial ------------------------------------------------------------
    def _complete(self, study: Any, run: _Trial) -> None:
        from airflow_tfk.run.results import collect_results

        handle = run.handle
        results = collect_results(
            self.backend, handle.ref, handle.replicas, evaluator_wait=float(handle.ps_grace_seconds)
        )
        value = objective_value(self.config.objective, results.metrics, results.eval_metrics)
        self._report_curve(run)  # before the delete: a cluster's logs may go with it
        run.trial.set_user_attr(studies.STEPS, run.last_step)
        run.trial.set_user_attr(studies.METRICS, results.metrics)
        if results.export:
            run.trial.set_user_attr(studies.EXPORT, results.export)
            exported = results.export.get("version") if isinstance(results.export, dict) else None
            if exported is not None and studies.MODEL_VERSION not in run.trial.user_attrs:
                run.trial.set_user_attr(studies.MODEL_VERSION, exported)  # the version it claimed
        # The roles that never exit (PS, workers of parameter_server) go with the rest;
        # collect_results gave the evaluator its grace already.
        ended = end_run(
            handle,
            f"trial {run.number} of sweep {self.study_name} finished",
            result=RunResult.ACCEPTED,
            emit=self.emit,
            grace_seconds=0,
            log_lines=0,
        )
        _record_usage(run, ended)
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
        _record_usage(
            run, end_run(run.handle, f"trial {run.number} of sweep {self.study_name} failed", emit=self.emit)
        )
        study.tell(run.trial, state=_state("FAIL"))

    def _end(self, run: _Trial, reason: str) -> None:
        """End a trial's cluster that has not finished (pruned, interrupted): a rejected
        run, so its exports (if any) are set aside and nothing of it can be published."""
        _record_usage(run, end_run(run.handle, reason, emit=self.emit, log_lines=0))

    def _claim(self, run: _Trial) -> bool:
        """Take the end of a running trial for this thread; False when another path
        (stop(), the loop, the judge) took it."""
        with self._lock:
            if self._running.pop(run.number, None) is None:
                return False
            run.claimed_by = threading.current_thread()
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
        me = threading.current_thread()
        with self._lock:
            self._stopping = self._stopping or reason
            # A trial this very thread is creating (a kill signal's handler runs on top of
            # the loop) cannot be deleted under it: the backend's create holds its lock.
            # It stays registered; the create, once back, sees the stop and ends it.
            runs = [r for r in self._running.values() if r.creating is not me]
            for run in runs:
                # Claimed like any end, so a stop on another thread (the loop's own, as
                # it raises) waits for these ends instead of returning before them.
                del self._running[run.number]
                run.claimed_by = me
                self._ending[run.number] = run
        ended = []
        try:
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
        finally:
            for run in runs:
                self._release(run)
        return ended

    def _await_claimed_ends(self) -> None:
        """Let the ends other threads already claimed (a trial completing or being pruned
        as the kill comes) finish, so the kill returns with nothing left; past the bound,
        delete them here (a delete is idempotent) and let their thread record them. Ends
        claimed by the thread calling stop() are not waited for: it is not carrying them
        out any more."""
        me = threading.current_thread()
        deadline = time.monotonic() + ENDING_WAIT_SECONDS

        def others() -> list[_Trial]:
            return [r for r in self._ending.values() if r.claimed_by is not me]

        with self._lock:
            while others() and time.monotonic() < deadline:
                self._ended.wait(max(0.0, deadline - time.monotonic()))
            late = others()
        for run in late:
            try:
                # The claim decides what the trial's exports are worth, not this.
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
            if any(t.user_attrs.get(studies.RERUN_OF) == number for t in study.get_trials(deepcopy=False)):
                return  # queued already (a stop and the retry's recovery both came here)
            trial = optuna.trial.Trial(study, trial_id)
            trial.set_user_attr(studies.INTERRUPTED, True)
            study.tell(number, state=_state("FAIL"), skip_if_finished=True)
            study.enqueue_trial(params, user_attrs={studies.RERUN_OF: number})
            self.emit(f"trial {number} interrupted: its parameters are queued to run again")
        except Exception as exc:
            self.emit(f"trial {number}: could not record the interruption ({exc}); the retry will")

    def result(self) -> SweepResult:
        result = study_result(self._study, self.config, self.study_name, self.storage, self.peak_concurrency)
        result.search_space_exhausted = self.exhausted
        result.budget_reached = self.over_budget
        return result


def _state(name: str) -> Any:
    import optuna

    return optuna.trial.TrialState[name]


def _record_usage(run: _Trial, ended: Any) -> None:
    """What the trial's cluster held, on the trial (before the study is told its end)."""
    if ended.usage is None or not ended.usage.tasks:
        return
    try:
        run.trial.set_user_attr(studies.USAGE, ended.usage.total().to_dict())
    except Exception as exc:  # a trial the study already holds as finished: no figures
        log.debug("no usage recorded for trial %s: %s", run.number, exc)
