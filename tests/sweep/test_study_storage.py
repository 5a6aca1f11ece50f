"""The study's storage between and across tries: a damaged file, a study made for the
other direction, several openers of a new file at once, a retry after a partial write,
and a study file lost while a previous try's trial clusters live on."""

from __future__ import annotations

import threading
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.lifecycle import resolve_spec
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.config import SweepConfig
from airflow_tfk.sweep.trials import base_name
from tests.helpers import assert_no_processes, cluster_processes, execute_in_thread, task_context, wait_for
from tests.sweep.sweep_helpers import load, make_op, sweep_config, trainer_spec

STUDY = "dag.sweep.manual__storage.-1"


def study_file(root: Path) -> Path:
    path = root / ".sweeps" / f"{STUDY}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize(
    "content",
    [b"not a database at all\n" * 50, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["text", "torn"],
)
def test_a_damaged_study_file_is_an_error_naming_it_and_nothing_starts(local_root, tmp_path, content) -> None:
    path = study_file(local_root)
    path.write_bytes(content)
    with pytest.raises(studies.StudyStorageError) as caught:
        make_op(tmp_path, n_trials=2).execute(task_context(run_id="manual__storage", task_id="sweep"))
    message = str(caught.value)
    assert str(path) in message and "move it aside" in message, message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert LocalBackend(str(local_root)).find(None, {}) == []


def test_a_study_made_for_the_other_direction_is_refused(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(storage=url, study_name="s", direction="minimize")
    config = SweepConfig.from_dict(sweep_config(2))  # maximize
    with pytest.raises(studies.StudyStorageError, match="made to minimize .* to maximize"):
        studies.open_study(config, url, "s")


def test_several_openers_of_a_new_study_file_at_once_all_get_the_study(tmp_path) -> None:
    """Two sweeps given the same storage, or a sweep and a reader, create the new file's
    tables at the same moment; neither may fail for it."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    config = SweepConfig.from_dict(sweep_config(2))
    start = threading.Barrier(6)
    opened: list[int] = []
    errors: list[BaseException] = []

    def open_it() -> None:
        start.wait()
        try:
            opened.append(studies.open_study(config, url, "shared")._study_id)
        except BaseException as exc:  # the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(set(opened)) == 1, errors


def test_a_retry_after_a_kill_between_failing_a_trial_and_queueing_it_runs_its_params(
    local_root, tmp_path
) -> None:
    """The kill that interrupted trial 0 failed it in the study, then died before queueing
    its parameters: the retry queues them, and runs them once."""
    config = SweepConfig.from_dict(sweep_config(2))
    study = studies.open_study(config, studies.storage_url(None, "local", str(local_root), STUDY), STUDY)
    trial = study.ask(studies.distributions(config))
    trial.set_user_attr(studies.INTERRUPTED, True)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)

    result = make_op(tmp_path, n_trials=2, steps=5).execute(
        task_context(run_id="manual__storage", task_id="sweep")
    )
    reruns = [t for t in load(result).trials if t.user_attrs.get(studies.RERUN_OF) == 0]
    assert len(reruns) == 1 and reruns[0].params == trial.params, reruns
    assert reruns[0].state.name in ("COMPLETE", "PRUNED")
    assert sum(r["state"] in ("COMPLETE", "PRUNED") for r in result["trials"]) == 2
    assert_no_processes(local_root)


def test_a_lost_study_file_leaves_no_trial_cluster_of_the_previous_try(local_root, tmp_path, capfd) -> None:
    """The previous try's study file is gone (deleted, or a new volume), but one of its
    trial clusters still trains: the retry finds it by its labels, ends it, and says so."""
    identity = RunIdentity("dag", "sweep", "manual__storage")
    left = f"{base_name(identity)}-t5"
    backend = LocalBackend(str(local_root))
    backend.create(resolve_spec({**trainer_spec(tmp_path, steps=100000), "name": left}, identity), identity)
    wait_for(lambda: cluster_processes(local_root), timeout=30, what="the previous try's trial")

    result = make_op(tmp_path, n_trials=1, steps=5).execute(
        task_context(run_id="manual__storage", task_id="sweep")
    )
    status = backend.status(ClusterRef(left, "default"))
    assert not status.exists and "unknown to its study" in status.deleted_reason
    assert [r["state"] for r in result["trials"]] in (["COMPLETE"], ["PRUNED"])
    out = capfd.readouterr()
    assert "deleted or replaced" in out.out + out.err
    assert backend.find(None, {}) == []
    assert_no_processes(local_root)


def test_a_second_sweep_on_a_study_in_use_is_refused_and_the_first_is_untouched(local_root, tmp_path) -> None:
    """Two sweeps (two DAG runs) given the same study_name and storage at once: the second
    would take the first's running trials for a dead try's, fail and requeue them and
    break the first. It is refused, naming the study and the sweep using it."""
    shared = {"study_name": "shared", "storage": "shared.db"}
    first = make_op(tmp_path, n_trials=2, steps=40, **shared)
    thread, errors = execute_in_thread(first, task_context(run_id="manual__first", task_id="sweep"))
    backend = LocalBackend(str(local_root))

    def a_trial_training() -> bool:
        path = local_root / ".sweeps" / "shared.db"
        if not path.exists():
            return False
        try:
            trials = optuna.load_study(study_name="shared", storage=f"sqlite:///{path}").trials
        except (KeyError, ValueError, sqlalchemy.exc.SQLAlchemyError):
            return False
        names = [t.user_attrs.get(studies.CLUSTER) for t in trials if t.state.name == "RUNNING"]
        return any(n and backend.exists(ClusterRef(n, "default")) for n in names)

    wait_for(a_trial_training, timeout=120, what="a trial of the first sweep training")
    with pytest.raises(studies.StudyStorageError, match="in use by another sweep.*manual__first"):
        make_op(tmp_path, n_trials=2, **shared).execute(
            task_context(run_id="manual__second", task_id="sweep")
        )
    thread.join(120)
    assert not thread.is_alive() and errors == [], errors
    trials = optuna.load_study(
        study_name="shared", storage=f"sqlite:///{local_root / '.sweeps' / 'shared.db'}"
    ).trials
    assert sorted(t.state.name for t in trials) in (
        ["COMPLETE", "COMPLETE"],
        ["COMPLETE", "PRUNED"],
    ), trials
    assert not any(t.user_attrs.get(studies.INTERRUPTED) for t in trials)
    assert_no_processes(local_root)
