"""A reopened study continues, it does not repeat: whatever the sampler, a trial is never
given a point another trial of the study trained, runs or waits to run, unless the search
space is exhausted, and then the sweep says so and stops. A new study keeps its seed's
parameters. Real Optuna, real SQLite studies; no clusters (the sweep's own retry is in
tests/sweep/test_sweep_local.py)."""

from __future__ import annotations

import random

import optuna
import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.sweep import distinct
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.config import SweepConfig
from tests.sweep.sweep_helpers import sweep_config

SPACES = {
    "continuous": {"lr": {"type": "float", "low": 0.0, "high": 1.0}},
    "mixed": {
        "lr": {"type": "float", "low": 1e-4, "high": 0.3, "log": True},
        "hidden": {"type": "int", "low": 8, "high": 128},
        "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
    },
    "discrete": {
        "hidden": {"type": "int", "low": 1, "high": 4},
        "drop": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.25},
    },
}


def config_of(sampler: str, space: str, seed: int | None = 7) -> SweepConfig:
    return SweepConfig.from_dict(
        sweep_config(20, search_space=SPACES[space], sampler={"name": sampler, "seed": seed})
    )


def one_try(config: SweepConfig, url: str, asks: int) -> list[optuna.trial.FrozenTrial]:
    """What a try of the sweep does with its study: open it, ask, and end the trials as
    trainings would (completed, pruned); the last one is left running (a hard kill)."""
    study = studies.open_study(config, url, "s")
    dists = studies.distributions(config)
    for i in range(asks):
        trial = study.ask(dists)
        if i < asks - 1:
            state = optuna.trial.TrialState.PRUNED if i % 3 == 2 else None
            study.tell(trial, None if state else float(i), state=state)
    return study.get_trials()


@pytest.mark.parametrize(
    ("sampler", "space"),
    [
        ("random", "mixed"),
        ("random", "discrete"),
        ("tpe", "mixed"),
        ("tpe", "discrete"),
        ("grid", "discrete"),
    ],
)
def test_a_reopened_study_never_gets_a_point_it_holds(tmp_path, sampler, space) -> None:
    """A continuous parameter (mixed), and a space of 12 points of which the three tries
    take 12 (discrete); a grid needs a discrete space."""
    config = config_of(sampler, space)
    url = f"sqlite:///{tmp_path / 's.db'}"
    first = one_try(config, url, 4)
    # The retry, and then a sweep that opens the study once more: each with its sampler made afresh.
    one_try(config, url, 4)
    trials = one_try(config, url, 4)
    keys = [tuple(sorted(t.params.items())) for t in trials if t.state.name != "FAIL"]
    assert len(keys) == len(set(keys)) == 12, [t.params for t in trials]
    assert {t.number for t in first} < {t.number for t in trials}


def test_a_new_study_keeps_the_seeds_parameters(tmp_path) -> None:
    """The seed still decides a new study's parameters: what Optuna's own seeded sampler
    gives, and the same in two new studies."""
    config = config_of("random", "mixed")
    a = one_try(config, f"sqlite:///{tmp_path / 'a.db'}", 5)
    b = one_try(config, f"sqlite:///{tmp_path / 'b.db'}", 5)
    assert [t.params for t in a] == [t.params for t in b]
    plain = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
    expected = [plain.ask(studies.distributions(config)).params for _ in range(5)]
    assert [t.params for t in a] == expected


def test_a_sampler_that_keeps_proposing_a_held_point_is_overruled(tmp_path) -> None:
    """A sampler that converged (TPE on a small space, or any deterministic one) proposes
    the same point again and again: the trial gets an unheld one all the same."""

    class Stuck:
        def infer_relative_search_space(self, study, trial):
            return {}

        def sample_independent(self, study, trial, name, dist):
            return {"hidden": 2, "drop": 0.25}[name]

        def before_trial(self, study, trial):
            pass

        def after_trial(self, study, trial, state, values):
            pass

    config = config_of("random", "discrete")
    study = studies.open_study(config, f"sqlite:///{tmp_path / 's.db'}", "s")
    study.sampler = distinct.DistinctSampler(Stuck(), config, 7)
    params = []
    for _ in range(12):  # the whole space: 4 x 3 points
        trial = study.ask(studies.distributions(config))
        study.tell(trial, 1.0)
        params.append(tuple(sorted(trial.params.items())))
    assert len(set(params)) == 12
    assert params[0] == (("drop", 0.25), ("hidden", 2))
    assert distinct.exhausted(study, config) == 12
    with pytest.raises(distinct.SearchSpaceExhausted):
        distinct.unheld_point(config, distinct.held_points(study, config), random.Random(0))


def test_exhaustion_waits_for_queued_trials_and_a_failed_point_is_free_again(tmp_path) -> None:
    config = SweepConfig.from_dict(
        sweep_config(5, search_space={"opt": {"type": "categorical", "choices": ["a", "b"]}})
    )
    study = studies.open_study(config, f"sqlite:///{tmp_path / 's.db'}", "s")
    dists = studies.distributions(config)
    first = study.ask(dists)
    study.tell(first, 1.0)
    second = study.ask(dists)
    assert second.params != first.params
    assert distinct.exhausted(study, config) == 2  # one completed, one running
    study.tell(second, state=optuna.trial.TrialState.FAIL)
    assert distinct.exhausted(study, config) is None
    study.enqueue_trial(second.params)
    assert distinct.exhausted(study, config) is None  # the queued one still runs
    assert study.ask(dists).params == second.params


def test_grid_needs_a_discrete_space_of_a_listable_size() -> None:
    with pytest.raises(SpecError, match=r"search_space\.lr.*step"):
        config_of("grid", "continuous")
    big = {f"p{i}": {"type": "int", "low": 0, "high": 99} for i in range(3)}
    with pytest.raises(SpecError, match=r"sampler\.name.*1,000,000 points"):
        SweepConfig.from_dict(sweep_config(5, search_space=big, sampler="grid"))
