"""A study has one owning sweep, checked before the first trial: another task instance is
refused with the study and the owner named, the next try of the same task instance takes
it over (an earlier one is refused), a finished owner releases it, an owner gone quiet
past the lease loses it. Real SQLite studies; two real processes race for each of a
series of studies and exactly one wins each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest

import airflow_tfk.sweep.runner as runner
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.sweep import owner as owners
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.config import SweepConfig
from tests.helpers import ROOT, assert_no_processes, execute_in_thread, task_context, wait_for
from tests.sweep.sweep_helpers import make_op, sweep_config

RACE = str(Path(__file__).parent / "tasks" / "claim_race.py")


def ownership(study, run_id: str, try_number: int = 1, clock=time.time) -> owners.StudyOwnership:
    me = owners.SweepOwner.of(RunIdentity("dag", "sweep", run_id), try_number)
    return owners.StudyOwnership(study, me, "s", "sqlite:///s.db", clock=clock)


def record(study) -> dict:
    return optuna.load_study(study_name="s", storage=study._storage).user_attrs[owners.OWNER]


@pytest.fixture
def study(tmp_path):
    config = SweepConfig.from_dict(sweep_config(2))
    return studies.open_study(config, f"sqlite:///{tmp_path / 's.db'}", "s")


def test_another_task_instance_is_refused_until_the_owner_releases_the_study(study) -> None:
    first = ownership(study, "manual__a")
    assert first.claim() is None
    assert record(study)["run_id"] == "manual__a"
    with pytest.raises(owners.StudyInUse) as refused:
        ownership(study, "manual__b").claim()
    message = str(refused.value)
    assert "'s'" in message and "in use by another sweep" in message and "run manual__a" in message
    assert record(study)["run_id"] == "manual__a"  # the refused one wrote nothing
    first.release()
    assert record(study)["released"] is True
    assert ownership(study, "manual__b").claim() is None
    assert record(study)["run_id"] == "manual__b"


def test_the_next_try_takes_the_study_over_and_an_earlier_try_is_refused(study) -> None:
    first = ownership(study, "manual__a", try_number=1)
    first.claim()  # and never released: the try was killed
    second = ownership(study, "manual__a", try_number=2)
    taken = second.claim()
    assert taken is not None and "previous try" in taken and "try 1" in taken
    assert record(study)["try_number"] == 2
    with pytest.raises(owners.StudyInUse, match="later try of this task instance"):
        ownership(study, "manual__a", try_number=1).claim()
    # The first try, still alive somewhere, finds it lost its claim at its next renewal.
    assert first.renew() is False and "try 2" in (first.lost or "")
    first.release()  # releases nothing of the second try's
    assert record(study)["try_number"] == 2 and "released" not in record(study)


def test_an_owner_gone_quiet_past_the_lease_is_taken_over(study) -> None:
    now = [1_000_000.0]
    ownership(study, "manual__a", clock=lambda: now[0]).claim()
    now[0] += owners.LEASE_SECONDS - 5
    with pytest.raises(owners.StudyInUse):
        ownership(study, "manual__b", clock=lambda: now[0]).claim()
    now[0] += 10
    taken = ownership(study, "manual__b", clock=lambda: now[0]).claim()
    assert taken is not None and "run manual__a" in taken and "it is gone" in taken


def test_two_processes_claiming_one_study_at_the_same_instant_never_both_win(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    rounds = 6
    config = SweepConfig.from_dict(sweep_config(1))
    for i in range(rounds):  # made here: the race is for the claim, not the study's tables
        studies.open_study(config, url, f"race-{i}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = {
        run_id: subprocess.Popen(
            [sys.executable, RACE, url, run_id, str(tmp_path), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for run_id in ("manual__a", "manual__b")
    }
    try:
        wait_for(
            lambda: (
                all((tmp_path / f"ready-{r}").exists() for r in procs)
                or any(p.poll() is not None for p in procs.values())
            ),
            timeout=120,
            what="both racers ready",
        )
        (tmp_path / "go").write_text(json.dumps([time.time() + 0.3, 0.2]))
        outs = {r: p.communicate(timeout=120) for r, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    lines = {}
    for run_id, (out, err) in outs.items():
        assert procs[run_id].returncode == 0, err
        lines[run_id] = {row["round"]: row for row in map(json.loads, out.splitlines())}
    for i in range(rounds):
        a, b = lines["manual__a"][i], lines["manual__b"][i]
        assert a["won"] != b["won"], (i, a, b)
        winner, loser = ("manual__a", b) if a["won"] else ("manual__b", a)
        assert f"run {winner}" in loser["error"] and f"'race-{i}'" in loser["error"], loser
        claimed = optuna.load_study(study_name=f"race-{i}", storage=url).user_attrs[owners.OWNER]
        assert claimed["run_id"] == winner


def test_a_second_sweep_is_refused_before_the_first_has_a_trial_cluster(
    local_root, tmp_path, monkeypatch
) -> None:
    """The first sweep has asked for its first trial but not made its cluster yet, so no
    cluster says whose the running trial is: the second sweep is refused all the same, by
    the study's owner, and the first sweep's trial is untouched."""
    real = runner.create_or_reattach
    release = threading.Event()

    def first_waits(backend, spec, identity, emit):
        if identity.run_id == "manual__first":
            release.wait(120)
        return real(backend, spec, identity, emit)

    monkeypatch.setattr(runner, "create_or_reattach", first_waits)
    shared = {"study_name": "shared", "storage": "shared.db"}
    first = make_op(tmp_path, n_trials=1, steps=5, **shared)
    thread, errors = execute_in_thread(first, task_context(run_id="manual__first", task_id="sweep"))
    try:
        wait_for(
            lambda: (
                first._runner is not None
                and first._runner._study is not None
                and bool(first._runner._running)
            ),
            timeout=120,
            what="the first sweep's first trial",
        )
        with pytest.raises(owners.StudyInUse, match="'shared'.*in use by another sweep.*run manual__first"):
            make_op(tmp_path, n_trials=1, steps=5, **shared).execute(
                task_context(run_id="manual__second", task_id="sweep")
            )
        assert LocalBackend(str(local_root)).find(None, {}) == []  # the second made no cluster
    finally:
        release.set()
    thread.join(120)
    assert not thread.is_alive() and errors == [], errors
    trials = optuna.load_study(
        study_name="shared", storage=f"sqlite:///{local_root / '.sweeps' / 'shared.db'}"
    ).trials
    assert len(trials) == 1 and trials[0].state.name == "COMPLETE", trials
    assert not trials[0].user_attrs.get(studies.INTERRUPTED)
    claim = optuna.load_study(
        study_name="shared", storage=f"sqlite:///{local_root / '.sweeps' / 'shared.db'}"
    ).user_attrs
    assert claim[owners.OWNER]["run_id"] == "manual__first" and claim[owners.OWNER]["released"] is True
    # Released: the next sweep on the study is not refused.
    result = make_op(tmp_path, n_trials=2, steps=5, **shared).execute(
        task_context(run_id="manual__second", task_id="sweep")
    )
    assert len(result["trials"]) == 2
    assert_no_processes(local_root)


def test_a_try_whose_study_a_later_try_took_over_starts_no_trial_after(
    local_root, tmp_path, monkeypatch
) -> None:
    """Try 1 still runs (a zombie Airflow gave up on) when try 2 claims the study: try 1
    starts no trial after that, it stops, and leaves no cluster."""
    real = runner.create_or_reattach
    op = make_op(tmp_path, n_trials=3, steps=5, max_concurrent_trials=1)

    def try_two_claims_meanwhile(backend, spec, identity, emit):
        study = op._runner._study
        if len(study.get_trials(deepcopy=False)) == 1:
            ownership(study, "manual__zombie", try_number=2).claim()
        return real(backend, spec, identity, emit)

    monkeypatch.setattr(runner, "create_or_reattach", try_two_claims_meanwhile)
    with pytest.raises(runner.SweepStopped, match="taken over by .*try 2"):
        op.execute(task_context(run_id="manual__zombie", task_id="sweep"))
    (db,) = (local_root / ".sweeps").glob("*.db")
    trials = optuna.load_study(study_name=None, storage=f"sqlite:///{db}").trials
    assert len(trials) == 1, trials
    assert record_at(db)["try_number"] == 2  # try 1's end released nothing of try 2's
    assert LocalBackend(str(local_root)).find(None, {}) == []
    assert_no_processes(local_root)


def record_at(db: Path) -> dict:
    return optuna.load_study(study_name=None, storage=f"sqlite:///{db}").user_attrs[owners.OWNER]


def _forge(study, value_json: str) -> None:
    """An owner record as the study's database holds it, written by hand (corrupt, forged)."""
    import sqlite3

    url = str(study._storage._backend.engine.url) if hasattr(study._storage, "_backend") else ""
    path = url.removeprefix("sqlite:///") or str(study._storage.engine.url).removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM study_user_attributes WHERE key = ?", (owners.OWNER,))
        db.execute(
            "INSERT INTO study_user_attributes (study_id, key, value_json) VALUES (?, ?, ?)",
            (study._study_id, owners.OWNER, value_json),
        )


NOW = 1_000_000.0


@pytest.mark.parametrize(
    "renewed_at",
    [
        '"soon"',
        "[1]",
        "{}",
        "true",
        "NaN",
        "Infinity",
        "-Infinity",
        str(NOW + 10 * owners.LEASE_SECONDS),
        "1e308",
    ],
)
def test_an_owner_record_with_no_renewal_time_to_trust_does_not_hold_the_study(
    study, renewed_at: str
) -> None:
    """A renewal time that is not a number, not finite, or further ahead than a lease (a
    forged record, a clock far off) would hold the study for ever or end the claim with a
    TypeError: the owner is judged gone, and the log says why."""
    _forge(study, f'{{"dag_id": "d", "task_id": "t", "run_id": "other", "renewed_at": {renewed_at}}}')
    taken = ownership(study, "manual__b", clock=lambda: NOW).claim()
    assert taken is not None and "run other" in taken and "it is gone" in taken
    assert record(study)["run_id"] == "manual__b"


def test_an_owner_a_little_ahead_of_this_clock_still_holds_it(study) -> None:
    _forge(study, json.dumps({"dag_id": "d", "run_id": "other", "renewed_at": NOW + 60}))
    with pytest.raises(owners.StudyInUse):
        ownership(study, "manual__b", clock=lambda: NOW).claim()


def test_a_corrupt_or_huge_owner_record_is_judged_and_named_within_bounds(study) -> None:
    _forge(study, "[" * 100_000 + "]" * 100_000)  # nested past Python's recursion limit
    assert "it is gone" in (ownership(study, "manual__b", clock=lambda: NOW).claim() or "")
    huge = "h" * 1_000_000
    _forge(study, json.dumps({"dag_id": huge, "run_id": huge, "host": huge, "renewed_at": NOW}))
    with pytest.raises(owners.StudyInUse) as refused:
        ownership(study, "manual__b", clock=lambda: NOW).claim()
    assert len(str(refused.value)) < 4000
