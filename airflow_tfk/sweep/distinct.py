"""The sampler a sweep asks: never a point the study already holds.

A study outlives its sweep task: a retry of the task, or a later sweep given the same
``study_name``, opens it again with a sampler made afresh. A seeded sampler made afresh
starts its random stream from the beginning, so without more it proposes the points the
first try trained, one by one. :class:`DistinctSampler` wraps whatever sampler the sweep
chose and, for each trial, takes the sampler's proposal only when no trial of the study
that completed, was pruned, is running or waits to run holds the same point; else it asks
again, and past a few tries it draws a point nobody holds itself. A search space whose
every point is held is exhausted: :func:`exhausted` says so before a trial is asked for,
and the sweep stops there.

The sampler's own seed is the user's for a study without trials (the same seed gives the
same parameters, as it always did) and one derived from the user's and the number of
trials the study holds for a study reopened, so each try continues, not repeats.

Optuna is imported inside the functions (no import when a DAG file is parsed).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Iterator, Mapping
from itertools import product
from typing import Any

from airflow_tfk.sweep.config import ParamKind, ParamSpec, SweepConfig

#: Proposals of the wrapped sampler tried per trial before drawing an unheld point here.
SAMPLER_TRIES = 20
#: Spaces up to this many points are enumerated to find an unheld one, and can be found
#: exhausted; bigger ones (or any with a continuous parameter) are drawn from at random.
MAX_ENUMERATED_POINTS = 100_000
#: Random draws for an unheld point of a space too big to enumerate.
RANDOM_DRAWS = 2_000
#: Trial states whose point is taken: trained, training, or queued to train. A FAIL is
#: not: its point never gave a value, so it may be proposed again.
HOLDING_STATES = ("COMPLETE", "PRUNED", "RUNNING", "WAITING")

Key = tuple[Any, ...]


class SearchSpaceExhausted(RuntimeError):
    """Every point of the search space is held by a trial of the study."""


def derived_seed(seed: int | None, *salt: object) -> int | None:
    """A seed of 32 bits from the user's and ``salt``; None stays None (unseeded)."""
    if seed is None:
        return None
    text = ":".join(str(s) for s in (seed, *salt))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def sampler_seed(seed: int | None, trials_held: int) -> int | None:
    """The wrapped sampler's seed: the user's for a study without trials, else derived
    from it and the count of trials, so a reopened study gets a stream of its own."""
    return seed if trials_held == 0 else derived_seed(seed, "reopened", trials_held)


# -- the points of a search space -------------------------------------------------------
def _grid(p: ParamSpec) -> list[Any] | None:
    """Every value of a discrete parameter, in order; None for a continuous one."""
    if p.kind is ParamKind.CATEGORICAL:
        return list(p.choices)
    if p.kind is ParamKind.INT:
        return list(range(int(p.low or 0), int(p.high or 0) + 1, int(p.step or 1)))
    count = _count(p)
    if count is None:
        return None
    low, step = float(p.low or 0), float(p.step or 1)
    return [low + k * step for k in range(count)]


def _count(p: ParamSpec) -> int | None:
    if p.kind is ParamKind.CATEGORICAL:
        return len(p.choices)
    if p.kind is ParamKind.INT:
        return (int(p.high or 0) - int(p.low or 0)) // int(p.step or 1) + 1
    if p.step is None:
        return None
    return int(math.floor((float(p.high or 0) - float(p.low or 0)) / float(p.step) + 1e-9)) + 1


def space_size(config: SweepConfig) -> int | None:
    """How many points the search space has; None when a parameter is continuous."""
    size = 1
    for p in config.search_space.values():
        n = _count(p)
        if n is None:
            return None
        size *= n
    return size


def _value_key(p: ParamSpec, value: Any) -> Any:
    """A value as points are compared: a choice with its type (``1`` is not ``True``), a
    stepped float by its index on the grid (the sampler's arithmetic may differ in the
    last bit from ours)."""
    if p.kind is ParamKind.CATEGORICAL:
        return (type(value).__name__, value)
    if p.kind is ParamKind.INT:
        return int(value)
    if p.step is not None:
        return round((float(value) - float(p.low or 0)) / float(p.step))
    return float(value)


def point_key(config: SweepConfig, params: Mapping[str, Any]) -> Key | None:
    """The point ``params`` are in the sweep's space; None when a parameter is missing
    (a trial of another search space)."""
    names = sorted(config.search_space)
    if any(name not in params for name in names):
        return None
    try:
        return tuple(_value_key(config.search_space[name], params[name]) for name in names)
    except (TypeError, ValueError):
        return None


def held_points(study: Any, config: SweepConfig, exclude: int | None = None) -> set[Key]:
    """The points the study's trials hold (:data:`HOLDING_STATES`), but trial ``exclude``'s."""
    held = set()
    for t in study.get_trials(deepcopy=False):
        if t.number == exclude or t.state.name not in HOLDING_STATES:
            continue
        params = t.params or t.system_attrs.get("fixed_params") or {}
        key = point_key(config, params)
        if key is not None:
            held.add(key)
    return held


def _points(config: SweepConfig) -> Iterator[dict[str, Any]]:
    names = list(config.search_space)
    grids = [_grid(config.search_space[n]) or [] for n in names]
    for values in product(*grids):
        yield dict(zip(names, values, strict=True))


def exhausted(study: Any, config: SweepConfig) -> int | None:
    """The size of the search space when the study holds every point of it and no trial
    waits to run; None while a trial can still be asked for."""
    size = space_size(config)
    if size is None or size > MAX_ENUMERATED_POINTS:
        return None
    trials = study.get_trials(deepcopy=False)
    if any(t.state.name == "WAITING" for t in trials):
        return None  # a queued trial runs its own parameters: no sampling needed
    held = held_points(study, config)
    if len(held) < size:
        return None
    free = any(point_key(config, point) not in held for point in _points(config))
    return None if free else size


def _draw(p: ParamSpec, rng: random.Random) -> Any:
    grid = _grid(p) if (_count(p) or MAX_ENUMERATED_POINTS + 1) <= MAX_ENUMERATED_POINTS else None
    if grid is not None:
        return rng.choice(grid)
    if p.kind is ParamKind.INT:
        step = int(p.step or 1)
        return int(p.low or 0) + step * rng.randrange((int(p.high or 0) - int(p.low or 0)) // step + 1)
    low, high = float(p.low or 0), float(p.high or 0)
    if p.step is not None:
        return low + float(p.step) * rng.randrange(int((high - low) / float(p.step) + 1e-9) + 1)
    if p.log:
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    return rng.uniform(low, high)


def unheld_point(config: SweepConfig, held: set[Key], rng: random.Random) -> dict[str, Any]:
    """A point of the space no trial holds, at random; :class:`SearchSpaceExhausted` when
    there is none."""
    size = space_size(config)
    if size is not None and size <= MAX_ENUMERATED_POINTS:
        free = [p for p in _points(config) if point_key(config, p) not in held]
        if not free:
            raise SearchSpaceExhausted(f"all {size} points of the search space are held by trials")
        return rng.choice(free)
    for _ in range(RANDOM_DRAWS):
        point = {name: _draw(p, rng) for name, p in config.search_space.items()}
        if point_key(config, point) not in held:
            return point
    raise SearchSpaceExhausted(f"{RANDOM_DRAWS} random points of the search space were all held by trials")


class DistinctSampler:
    """An Optuna sampler (its protocol, duck-typed: Optuna is not importable here) that
    proposes only points the study does not hold.

    :param inner: the sampler that chooses (TPE, random); None for a grid search, where
        each trial takes an unheld point of the grid at random.
    :param seed: the user's seed, for the points drawn here (per trial number: a trial's
        draw does not depend on how many draws came before it).
    """

    def __init__(self, inner: Any, config: SweepConfig, seed: int | None) -> None:
        from airflow_tfk.sweep.study import distributions

        self.inner = inner
        self._config = config
        self._seed = seed
        self._distributions = distributions(config)

    # Every parameter of the space is sampled at once, so the point can be checked whole.
    def infer_relative_search_space(self, study: Any, trial: Any) -> dict[str, Any]:
        return dict(self._distributions)

    def sample_relative(self, study: Any, trial: Any, search_space: Mapping[str, Any]) -> dict[str, Any]:
        if not search_space:
            return {}
        held = held_points(study, self._config, exclude=trial.number)
        if self.inner is not None:
            for _ in range(SAMPLER_TRIES):
                params = self._propose(study, trial)
                if point_key(self._config, params) not in held:
                    return params
        seed = derived_seed(self._seed, "trial", trial.number)
        return unheld_point(self._config, held, random.Random(seed))

    def _propose(self, study: Any, trial: Any) -> dict[str, Any]:
        inner = self.inner
        space = inner.infer_relative_search_space(study, trial)
        params = dict(inner.sample_relative(study, trial, space)) if space else {}
        for name, dist in self._distributions.items():
            if name not in params:
                params[name] = inner.sample_independent(study, trial, name, dist)
        return params

    def sample_independent(self, study: Any, trial: Any, name: str, distribution: Any) -> Any:
        # Only a parameter outside the sweep's space comes here (the sweep asks for none).
        if self.inner is not None:
            return self.inner.sample_independent(study, trial, name, distribution)
        import optuna

        return optuna.samplers.RandomSampler(seed=self._seed).sample_independent(
            study, trial, name, distribution
        )

    def before_trial(self, study: Any, trial: Any) -> None:
        if self.inner is not None:
            self.inner.before_trial(study, trial)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        if self.inner is not None:
            self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        if self.inner is not None:
            self.inner.reseed_rng()
