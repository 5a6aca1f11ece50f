"""A kill of a sweep at the moments where it races the sweep's own threads: as the loop
decides whether any trial is left, between choosing a trial and registering it, inside
the backend's create on the loop's own thread (where a kill signal's handler runs), and
while the judge ends a loser. Whatever the moment: the sweep raises, no trial cluster is
left or created after the kill returned, and each trial ends in one state only."""

from __future__ import annotations

import linecache
import sys
import threading
import time

import optuna

import airflow_tfk.sweep.runner as runner
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.runner import SweepRunner
from tests.helpers import assert_no_processes, execute_in_thread, task_context
from tests.sweep.sweep_helpers import make_op, sweep_config


def kill_from_another_thread(op, wait: float) -> threading.Thread:
    """``op.on_kill()`` on a thread of its own; returns once the kill has begun (or after
    ``wait`` s, when the caller holds what the kill needs)."""
    killer = threading.Thread(target=op.on_kill)
    killer.start()
    deadline = time.monotonic() + wait
    while not op._runner._stopping and time.monotonic() < deadline:
        time.sleep(0.01)
    return killer


def finished_any(runner_: SweepRunner) -> bool:
    return any(t.state.is_finished() for t in runner_._study.get_trials(deepcopy=False))


def study_trials(local_root) -> list[optuna.trial.FrozenTrial]:
    (db,) = (local_root / ".sweeps").glob("*.db")
    return optuna.load_study(study_name=None, storage=f"sqlite:///{db}").trials


def assert_stopped_and_clean(thread, errors, local_root) -> None:
    thread.join(90)
    assert not thread.is_alive(), "the killed sweep did not return"
    assert errors, "the killed sweep returned as if it had finished"
    assert "stopped" in str(errors[0]), repr(errors[0])
    assert LocalBackend(str(local_root)).find(None, {}) == []
    assert_no_processes(local_root)


def assert_requeued_once(trials, number: int) -> None:
    by_number = {t.number: t for t in trials}
    assert by_number[number].state.name == "FAIL" and by_number[number].user_attrs[studies.INTERRUPTED]
    reruns = [t for t in trials if t.user_attrs.get(studies.RERUN_OF) == number]
    assert len(reruns) == 1, reruns
    # A rerun not started yet holds its parameters as Optuna's fixed ones.
    assert (reruns[0].params or reruns[0].system_attrs["fixed_params"]) == by_number[number].params


def test_a_kill_as_the_loop_looks_for_trials_left_is_not_the_end_of_the_sweep(
    local_root, tmp_path, monkeypatch
) -> None:
    """The kill takes every running trial just as the loop counts the trials left: the
    count is 0, which is the kill's doing, not the sweep's end. The sweep raises; it does
    not return the finished trials as its result."""
    op = make_op(tmp_path, n_trials=6)
    real = SweepRunner._busy
    killers: list[threading.Thread] = []

    def busy(self: SweepRunner) -> int:
        caller = sys._getframe(1)
        line = linecache.getline(caller.f_code.co_filename, caller.f_lineno)
        if not killers and "if not self._busy()" in line and self._running and finished_any(self):
            # The loop may hold the lock the kill takes: wait a little, not for the end.
            killers.append(kill_from_another_thread(op, wait=1.0))
        return real(self)

    monkeypatch.setattr(SweepRunner, "_busy", busy)
    thread, errors = execute_in_thread(op, task_context(run_id="manual__count", task_id="sweep"))
    assert_stopped_and_clean(thread, errors, local_root)
    assert killers, "the kill never came as the loop counted the trials left"
    killers[0].join(60)
    assert any(t.user_attrs.get(studies.INTERRUPTED) for t in study_trials(local_root))


def test_a_kill_between_choosing_a_trial_and_starting_it_creates_nothing_after(
    local_root, tmp_path, monkeypatch
) -> None:
    """The kill comes, and returns, after the loop asked Optuna for a trial and before it
    registered it: nothing may be created once the kill has returned (the task process
    may be gone the next moment). The trial chosen is failed and queued again."""
    op = make_op(tmp_path, n_trials=3, max_concurrent_trials=1)
    real_spec, real_create = runner.trial_spec, runner.create_or_reattach
    killed: list[int] = []
    created_after_kill: list[str] = []

    def spec_then_kill(spec, name, number, *args, **kwargs):
        if not killed and finished_any(op._runner):
            killed.append(number)
            kill_from_another_thread(op, wait=30).join(60)
        return real_spec(spec, name, number, *args, **kwargs)

    def create(backend, spec, *args, **kwargs):
        if op._runner._stopping:
            created_after_kill.append(spec.name)
        return real_create(backend, spec, *args, **kwargs)

    monkeypatch.setattr(runner, "trial_spec", spec_then_kill)
    monkeypatch.setattr(runner, "create_or_reattach", create)
    thread, errors = execute_in_thread(op, task_context(run_id="manual__ask", task_id="sweep"))
    assert_stopped_and_clean(thread, errors, local_root)
    assert killed, "the kill never came between a trial's choice and its start"
    assert created_after_kill == [], f"created after the kill returned: {created_after_kill}"
    assert_requeued_once(study_trials(local_root), killed[0])


def test_a_kill_signal_inside_the_backends_create_neither_hangs_nor_leaves_the_trial(
    local_root, tmp_path, monkeypatch
) -> None:
    """Airflow runs ``on_kill`` from the SIGTERM handler, on the thread that runs the sweep:
    here it lands inside the local backend's create, which holds the cluster's lock. The
    kill must not wait for that lock (it would wait for ever); the create, once back,
    ends the trial, and the sweep raises."""
    op = make_op(tmp_path, n_trials=2, max_concurrent_trials=1)
    real_launch = LocalBackend._launch
    killed: list[bool] = []

    def launch(self, *args, **kwargs):
        if not killed:
            killed.append(True)
            op.on_kill()  # as the signal handler would: on this thread, inside the create
        return real_launch(self, *args, **kwargs)

    monkeypatch.setattr(LocalBackend, "_launch", launch)
    thread, errors = execute_in_thread(op, task_context(run_id="manual__signal", task_id="sweep"))
    assert_stopped_and_clean(thread, errors, local_root)
    assert killed
    assert_requeued_once(study_trials(local_root), 0)


def test_a_kill_while_the_judge_prunes_a_trial_leaves_it_pruned_not_rerun(
    local_root, tmp_path, monkeypatch
) -> None:
    """The kill lands while the judge is ending a loser: that end is the judge's, so the
    trial stays PRUNED (not also interrupted and queued again), the kill waits for it and
    returns with nothing left."""
    op = make_op(tmp_path, n_trials=8)
    real_prune = SweepRunner._prune
    pruning: list[int] = []
    killers: list[threading.Thread] = []

    def prune_while_killed(self, study, run, step):
        if not killers:
            pruning.append(run.number)
            killers.append(kill_from_another_thread(op, wait=30))
            time.sleep(0.3)  # the kill is now waiting on the end the judge claimed
        return real_prune(self, study, run, step)

    monkeypatch.setattr(SweepRunner, "_prune", prune_while_killed)
    thread, errors = execute_in_thread(op, task_context(run_id="manual__prune", task_id="sweep"))
    assert_stopped_and_clean(thread, errors, local_root)
    assert killers, "no trial was pruned before the sweep ended"
    killers[0].join(60)
    assert not killers[0].is_alive(), "on_kill did not return"
    trials = {t.number: t for t in study_trials(local_root)}
    pruned = trials[pruning[0]]
    assert pruned.state.name == "PRUNED" and studies.INTERRUPTED not in pruned.user_attrs
    assert not [t for t in trials.values() if t.user_attrs.get(studies.RERUN_OF) == pruning[0]]


def test_a_trial_ending_while_the_loop_counts_never_starts_one_past_n_trials(tmp_path) -> None:
    """The judge ends a loser while the loop counts: the loop's read of the study still
    has the trial running, and the trial is released (no longer alive) by the time the
    loop counts the trials alive. Counted nowhere, it let the loop start one trial more
    than ``n_trials``. Here: 3 trials, trial 0 complete, trial 1 being pruned: one start."""
    from optuna.trial import TrialState, create_trial

    from airflow_tfk.sweep.config import SweepConfig

    config = SweepConfig.from_dict({**sweep_config(3), "max_concurrent_trials": 2})
    sweep = SweepRunner(
        LocalBackend(str(tmp_path)), None, None, config, base="b", study_name="s", storage="sqlite://"
    )  # type: ignore[arg-type]
    pruning = object()
    sweep._ending[1] = pruning  # type: ignore[assignment]

    class Study:
        def get_trials(self, deepcopy: bool) -> list:
            # The judge tells the study and releases trial 1 just after this read.
            read = [
                create_trial(state=TrialState.COMPLETE, value=1.0),
                create_trial(state=TrialState.RUNNING),
            ]
            sweep._ending.pop(1)
            return read

    started: list[int] = []

    def start(study, dists) -> None:  # registered as alive, as the real start does
        started.append(len(started) + 2)
        sweep._running[started[-1]] = pruning  # type: ignore[assignment]

    sweep._start = start  # type: ignore[method-assign]
    sweep._fill_slots(Study(), {})
    assert len(started) == 1, f"{len(started)} trials started where 3 - 2 ended = 1 was needed"
