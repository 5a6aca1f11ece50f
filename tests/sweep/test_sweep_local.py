"""TFHyperparameterSweepOperator on the local backend: real trial clusters (processes), a real Optuna
study in SQLite, the real operator code. The trials run a stand-in training
(tasks/sweep_trainer.py) whose loss tells a bad learning rate from a good one at every
step, so pruning decisions are checkable; the real-TensorFlow sweep is bench/bench_sweep.py.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import optuna
import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator
from airflow_tfk.protocol.progress import parse_line
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.trials import base_name
from tests.helpers import (
    assert_no_processes,
    cluster_processes,
    execute_in_thread,
    task_context,
    wait_for,
)
from tests.sweep.sweep_helpers import first_done_and_training, load, make_op, sweep_config, trainer_spec


class LiveClusters:
    """Counts the live trial clusters of a local root, every 20 ms, on a thread."""

    def __init__(self, root: Path) -> None:
        self.backend = LocalBackend(str(root))
        self.peak = 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                live = self.backend.find(None, {})
            except Exception:  # a cluster half-written at the moment of the look
                live = []
            self.peak = max(self.peak, len(live))
            self.seen.update(r.name for r in live)
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_pruning_ends_losing_trials_and_the_limit_holds(local_root, tmp_path, capfd) -> None:
    op = make_op(tmp_path, n_trials=8)
    watcher = LiveClusters(local_root)
    try:
        result = op.execute(task_context(task_id="sweep"))
    finally:
        watcher.stop()
    assert 1 <= watcher.peak <= 2, watcher.peak
    assert result["peak_concurrency"] == 2
    rows = {r["number"]: r for r in result["trials"]}
    assert len(rows) == 8
    pruned = [r for r in rows.values() if r["state"] == "PRUNED"]
    complete = [r for r in rows.values() if r["state"] == "COMPLETE"]
    assert pruned, f"no trial was pruned: {rows}"
    study = load(result)
    result_versions = {t.number: t.user_attrs.get(studies.MODEL_VERSION) for t in study.trials}
    assert len(pruned) + len(complete) == 8
    backend = LocalBackend(str(local_root))
    models = backend.claim_path("default", "tfk-models") / "toy"
    for r in pruned:
        # Ended early, through the backend's delete with the reason; what it had exported
        # is set aside (renamed out of the integer versions a server loads).
        assert r["steps"] is not None and r["steps"] < 30, r
        assert r["value"] is None and r["model_version"] is None
        assert result_versions[r["number"]] is None  # no version of its own: it published none
        status = backend.status(ClusterRef(r["cluster"], "default"))
        assert not status.exists and "pruned by the sweep" in status.deleted_reason
        # The pruner's question was fair: the trial was behind some finished trial.
        assert any(abs(r["params"]["lr"] - 0.3) > abs(c["params"]["lr"] - 0.3) for c in complete)
    for r in complete:
        assert r["steps"] == 30
    best = max(complete, key=lambda r: r["value"])
    assert result["best"]["number"] == best["number"]
    assert result["best"]["value"] == pytest.approx(-((best["params"]["lr"] - 0.3) ** 2))
    # The winner's export is what a TFPublishModelOperator downstream publishes.
    assert result["model_name"] == "toy"
    assert result["model_version"] == best["model_version"]
    assert Path(result["model_path"]).is_dir()
    exported = sorted(int(p.name) for p in models.iterdir() if p.name.isdigit())
    assert exported == sorted(r["model_version"] for r in complete)
    # Small integers: each completed trial published its own, from 1 up (a pruned trial's
    # export was set aside with its number, which a later trial may take again).
    assert len(set(exported)) == len(exported) and max(exported) <= 8, exported
    set_aside = list(models.glob(".failed-*"))
    assert len(set_aside) >= sum(1 for r in pruned if r["steps"] >= 3), sorted(
        p.name for p in models.iterdir()
    )
    # what each trial held (half a core for its run), and what pruning saved
    usage = result["usage"]
    assert usage["trials"] == 8 and usage["pruned"] == len(pruned)
    held = {r["number"]: r["core_seconds"] for r in rows.values()}
    assert all(v > 0 for v in held.values()), held
    assert usage["core_seconds"] == pytest.approx(sum(held.values()), abs=0.01)
    mean = sum(held[r["number"]] for r in complete) / len(complete)
    # a pruned trial ran fewer steps: it held less than a completed one on the whole
    assert sum(held[r["number"]] for r in pruned) / len(pruned) < mean
    assert usage["pruning_saved_core_seconds"] == pytest.approx(
        sum(max(0.0, mean - held[r["number"]]) for r in pruned), abs=0.01
    )
    out = capfd.readouterr()
    log = out.out + out.err
    assert "table of trials" in log and "PRUNED" in log
    assert "sweep usage: " in log and f"({len(pruned)} pruned: about " in log
    assert "the trials at a glance" in log and "parameter importance" in log  # the picture
    assert list(Path(result["storage"].removeprefix("sqlite:///")).parent.glob("*.svg"))
    assert_no_processes(local_root)


def test_on_kill_deletes_every_running_trial_and_a_retry_resumes(local_root, tmp_path) -> None:
    ctx = task_context(run_id="manual__kill", task_id="sweep")
    # Trials of 9 s (not 3): the two running when the kill comes must still be running
    # when it lands, however loaded the machine.
    # No pruning before step 60: a trial pruned at its first steps trains for a moment
    # only, and under load the wait below can miss every moment when two train at once.
    pruner = {"name": "median", "n_startup_trials": 2, "n_warmup_steps": 60}
    op = make_op(tmp_path, n_trials=6, steps=90, pruner=pruner)
    backend = LocalBackend(str(local_root))
    thread, errors = execute_in_thread(op, ctx)
    identity = RunIdentity("dag", "sweep", "manual__kill")

    # The study file is read only once the sweep has opened it: a reader of a new file sets
    # up its tables too, and each opener waits for the other's turn.
    wait_for(lambda: op._runner is not None and op._runner._study is not None, timeout=120, what="the study")
    wait_for(
        lambda: first_done_and_training(local_root, 2), timeout=240, what="a finished trial and two training"
    )
    op.on_kill()
    thread.join(60)
    assert not thread.is_alive()
    assert errors, "the killed sweep returned as if it had finished"
    assert backend.find(None, {}) == []
    assert_no_processes(local_root)

    (db,) = (local_root / ".sweeps").glob("*.db")
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
    first = {t.number: t for t in study.trials}
    interrupted = [t for t in first.values() if t.user_attrs.get(studies.INTERRUPTED)]
    finished = [t for t in first.values() if studies.counted(t)]
    assert interrupted and finished

    # The retry: the same task instance, a new operator object (a new process in Airflow).
    result = make_op(tmp_path, n_trials=6).execute(ctx)
    rows = {r["number"]: r for r in result["trials"]}
    assert sum(r["state"] in ("COMPLETE", "PRUNED") for r in rows.values()) == 6
    assert all(r["note"] == "interrupted; run again" for r in rows.values() if r["state"] == "FAIL")
    after = {t.number: t for t in load(result).trials}
    for t in finished:  # finished trials were not run again: same state, same start
        assert after[t.number].state == t.state and after[t.number].datetime_start == t.datetime_start
    reruns = [t for t in after.values() if studies.RERUN_OF in t.user_attrs]
    assert sorted(t.user_attrs[studies.RERUN_OF] for t in reruns) == sorted(t.number for t in interrupted)
    for t in reruns:
        assert t.params == first[t.user_attrs[studies.RERUN_OF]].params
    # Every trial cluster name is used once: nothing finished was created again.
    base = base_name(identity)
    assert all(r["cluster"] == f"{base}-t{n}" for n, r in rows.items())
    assert_no_processes(local_root)


def test_a_kill_while_a_trial_completes_leaves_it_completed_not_rerun(
    local_root, tmp_path, monkeypatch
) -> None:
    """The race CI met: the kill lands while the loop is reading a finished trial's results.
    The trial's end belongs to one path only: it stays COMPLETE with its export, it is not
    also marked interrupted and queued again, and the kill returns with nothing left."""
    import airflow_tfk.run.results as training_results

    real = training_results.collect_results
    op = make_op(tmp_path, n_trials=3, max_concurrent_trials=1)
    killer: list[threading.Thread] = []

    def collect_while_killed(*args, **kwargs):
        if not killer:  # the first trial's results: the kill comes now, from another thread
            killer.append(threading.Thread(target=op.on_kill))
            killer[0].start()
            wait_for(lambda: op._runner._stopping, timeout=30, what="the kill to start")
            time.sleep(0.3)  # the kill is now waiting on the end the loop claimed
        return real(*args, **kwargs)

    monkeypatch.setattr(training_results, "collect_results", collect_while_killed)
    thread, errors = execute_in_thread(op, task_context(run_id="manual__race", task_id="sweep"))
    thread.join(120)
    assert not thread.is_alive()
    killer[0].join(60)
    assert not killer[0].is_alive(), "on_kill did not return"
    assert errors, "the killed sweep returned as if it had finished"
    assert LocalBackend(str(local_root)).find(None, {}) == []
    assert_no_processes(local_root)

    (db,) = (local_root / ".sweeps").glob("*.db")
    trials = optuna.load_study(study_name=None, storage=f"sqlite:///{db}").trials
    assert [t.state.name for t in trials] == ["COMPLETE"], trials
    (done,) = trials
    assert studies.INTERRUPTED not in done.user_attrs
    assert Path(done.user_attrs[studies.EXPORT]["path"]).is_dir(), (
        "the completed trial's export was set aside"
    )


def test_a_kill_while_a_trial_is_created_stops_the_sweep(local_root, tmp_path, monkeypatch) -> None:
    """The race CI met next: the kill lands while the loop creates a trial, takes every
    running trial and returns. The loop finds no trial running after that create, which
    is not the sweep's end: it raises, and what the create made is deleted."""
    import airflow_tfk.sweep.runner as runner

    real = runner.create_or_reattach
    op = make_op(tmp_path, n_trials=4, max_concurrent_trials=1)
    killed: list[bool] = []

    def create_while_killed(*args, **kwargs):
        finished = [t for t in op._runner._study.trials if t.state.is_finished()]
        if finished and not killed:  # the second trial's create: the kill comes, and returns, first
            killed.append(True)
            op.on_kill()
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "create_or_reattach", create_while_killed)
    with pytest.raises(Exception, match="stopped"):
        op.execute(task_context(run_id="manual__create", task_id="sweep"))
    assert killed, "the kill never came during a create"
    assert LocalBackend(str(local_root)).find(None, {}) == []
    assert_no_processes(local_root)


def test_a_timeout_while_a_trial_completes_ends_and_requeues_it(local_root, tmp_path, monkeypatch) -> None:
    """The execution_timeout's signal lands inside the loop's own end of a trial: that end
    did not happen, so the stop that follows deletes the trial's cluster and queues it again."""
    import airflow_tfk.run.results as training_results

    class Timeout(BaseException):  # what Airflow's SIGALRM handler raises is a BaseException too
        pass

    def cut_short(*args, **kwargs):
        raise Timeout("execution_timeout")

    monkeypatch.setattr(training_results, "collect_results", cut_short)
    op = make_op(tmp_path, n_trials=3, max_concurrent_trials=1)
    with pytest.raises(Timeout):
        op.execute(task_context(run_id="manual__timeout", task_id="sweep"))
    assert LocalBackend(str(local_root)).find(None, {}) == []
    assert_no_processes(local_root)
    (db,) = (local_root / ".sweeps").glob("*.db")
    trials = optuna.load_study(study_name=None, storage=f"sqlite:///{db}").trials
    assert [t.state.name for t in trials] == ["FAIL", "WAITING"], trials
    assert trials[0].user_attrs[studies.INTERRUPTED] is True
    assert trials[1].user_attrs[studies.RERUN_OF] == 0


def test_a_retry_after_a_hard_kill_ends_the_trial_left_running(local_root, tmp_path) -> None:
    """A kill that never reached on_kill leaves a trial RUNNING in the study and its
    cluster alive: the retry deletes that cluster and runs the trial's parameters again."""
    ctx = task_context(run_id="manual__hard", task_id="sweep")
    op = make_op(tmp_path, n_trials=2)
    identity = RunIdentity("dag", "sweep", "manual__hard")
    study_name = "dag.sweep.manual__hard.-1"
    url = studies.storage_url(None, "local", str(local_root), study_name)
    from airflow_tfk.sweep.config import SweepConfig

    config = SweepConfig.from_dict(sweep_config(2))
    study = studies.open_study(config, url, study_name)
    trial = study.ask({"lr": optuna.distributions.FloatDistribution(0.0, 1.0)})
    name = f"{base_name(identity)}-t{trial.number}"
    trial.set_user_attr(studies.CLUSTER, name)
    from airflow_tfk.run.lifecycle import resolve_spec

    backend = LocalBackend(str(local_root))
    spec = resolve_spec({**trainer_spec(tmp_path, steps=100000), "name": name}, identity)
    backend.create(spec, identity)
    wait_for(lambda: cluster_processes(local_root), timeout=30, what="the orphan trial's processes")

    result = op.execute(ctx)
    status = backend.status(ClusterRef(name, "default"))
    assert not status.exists and "previous try" in status.deleted_reason
    rows = {r["number"]: r for r in result["trials"]}
    assert rows[0]["state"] == "FAIL" and rows[0]["note"] == "interrupted; run again"
    rerun = [t for t in load(result).trials if t.user_attrs.get(studies.RERUN_OF) == 0]
    assert len(rerun) == 1 and rerun[0].params == trial.params and rerun[0].state.name == "COMPLETE"
    assert sum(r["state"] in ("COMPLETE", "PRUNED") for r in rows.values()) == 2
    # The retry's sampler, seeded as the first try's, continues the study: the rerun
    # trained trial 0's point, so the next trial may not train it again.
    trained = [tuple(sorted(r["params"].items())) for r in rows.values() if r["state"] != "FAIL"]
    assert len(trained) == len(set(trained)), f"the retry trained a point twice: {rows}"
    assert_no_processes(local_root)


def test_a_sweep_whose_search_space_is_exhausted_stops_there_and_says_so(local_root, tmp_path, capfd) -> None:
    """Two points, four trials asked for: each point is trained once, the sweep ends with
    two trials and says why (XCom and log)."""
    space = {"lr": {"type": "categorical", "choices": [0.2, 0.4]}}
    op = make_op(tmp_path, n_trials=4, steps=5, search_space=space)
    result = op.execute(task_context(run_id="manual__small", task_id="sweep"))
    assert sorted(r["params"]["lr"] for r in result["trials"]) == [0.2, 0.4], result["trials"]
    assert result["search_space_exhausted"] == 2
    out = capfd.readouterr()
    assert "search space is exhausted" in out.out + out.err
    assert_no_processes(local_root)


def test_execution_timeout_deletes_every_running_trial(local_root, tmp_path) -> None:
    """Airflow's own timeout (SIGALRM in the task process) lands in the middle of the loop:
    every trial cluster goes, and the trials it interrupted are queued for the retry."""
    from airflow.sdk.exceptions import AirflowTaskTimeout
    from airflow.sdk.execution_time.timeout import timeout

    op = TFHyperparameterSweepOperator(
        task_id="sweep",
        backend="local",
        cluster_spec=trainer_spec(tmp_path, steps=100000),
        sweep=sweep_config(4),
    )
    with pytest.raises(AirflowTaskTimeout), timeout(10):
        op.execute(task_context(run_id="manual__timeout", task_id="sweep"))
    assert LocalBackend(str(local_root)).find(None, {}) == []
    assert_no_processes(local_root)
    (db,) = (local_root / ".sweeps").glob("*.db")
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
    states = sorted(t.state.name for t in study.trials)
    assert 1 <= states.count("FAIL") == states.count("WAITING") <= 2, states
    assert all(t.user_attrs.get(studies.INTERRUPTED) for t in study.trials if t.state.name == "FAIL")


def test_a_parameter_server_sweep_prunes_though_no_two_trials_report_the_same_step(
    local_root, tmp_path
) -> None:
    """A parameter_server chief reports the steps its workers had reached (59, 109, ...),
    so trials' progress lines fall on different steps, and Optuna's median pruner compares
    values at the same step only. The sweep reports on a grid of steps every trial shares:
    losers are pruned, the ps and workers of every trial go with its cluster."""
    spec = trainer_spec(tmp_path, steps=60)
    spec["mode"] = "parameter_server"
    spec["ps"] = {"replicas": 1}
    spec["chief"] = {"replicas": 1}
    spec["env"] = {**spec["env"], "STEP_SECONDS": "0.05", "LINE_EVERY": "10"}
    op = TFHyperparameterSweepOperator(
        task_id="sweep", backend="local", cluster_spec=spec, sweep=sweep_config(8)
    )
    result = op.execute(task_context(run_id="manual__ps", task_id="sweep"))
    rows = {r["number"]: r for r in result["trials"]}
    backend = LocalBackend(str(local_root))
    steps_of: dict[int, set[int]] = {}
    for n, r in rows.items():
        text = backend.log_path(ClusterRef(r["cluster"], "default"), "chief", 0).read_text()
        steps_of[n] = {p.step for p in map(parse_line, text.splitlines()) if p is not None}
    for a in rows:  # the premise: no step at which two trials could be compared as they report
        for b in rows:
            assert a == b or not steps_of[a] & steps_of[b], (a, b, steps_of[a] & steps_of[b])
    pruned = [r for r in rows.values() if r["state"] == "PRUNED"]
    complete = [r for r in rows.values() if r["state"] == "COMPLETE"]
    assert pruned, f"no trial of the parameter_server sweep was pruned: {rows}"
    assert len(pruned) + len(complete) == 8
    for r in pruned:
        assert r["steps"] < 60 and r["steps"] % 10 != 0, r  # judged at a line off the grid
        assert any(abs(r["params"]["lr"] - 0.3) > abs(c["params"]["lr"] - 0.3) for c in complete)
    assert_no_processes(local_root)


def test_a_sweep_budget_stops_starting_trials_when_the_next_would_cross_it(
    local_root, tmp_path, capfd
) -> None:
    """Each trial holds half a core for a few seconds; a budget of about three trials'
    worth ends the sweep short of its 8 trials, each start within the budget when it was
    made, and says so."""
    op = make_op(tmp_path, n_trials=8, steps=20, max_concurrent_trials=1, pruner={"name": "none"})
    op.sweep["budget_core_hours"] = 3 * 0.5 * 3.0 / 3600  # ~3 trials of ~3 s at 500m
    result = op.execute(task_context(task_id="sweep"))
    usage = result["usage"]
    assert usage["budget_reached"] is True
    held = [r["core_seconds"] for r in sorted(result["trials"], key=lambda r: r["number"])]
    assert 1 <= len(held) < 8, held
    # a trial started only when what was held, plus one more of the mean so far, fit
    budget = op.sweep["budget_core_hours"] * 3600
    for n in range(1, len(held)):
        mean = sum(held[:n]) / n
        assert sum(held[:n]) + mean <= budget, (n, held, budget)
    log = capfd.readouterr().out
    assert "would cross its budget of" in log and "no more trials start" in log
    assert_no_processes(local_root)
