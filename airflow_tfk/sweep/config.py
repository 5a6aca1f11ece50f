"""The ``sweep:`` settings: search space, objective, sampler, pruner, limits, storage.

Typed and validated here, before any cluster or study exists: a bad value raises
:class:`~airflow_tfk.core.errors.SpecError` naming its field (``sweep.search_space.lr.low``).
Pure: no Optuna, no Airflow.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.core.errors import SpecError, unknown_key

MAX_TRIALS = 10_000
#: The largest bound or step of a range: Optuna computes in floats, and a flag's value
#: must read back as the number it was.
MAX_MAGNITUDE = 1e15
#: Optuna keeps a study's name in a column of 512 characters.
MAX_NAME_CHARS = 512
#: An app flag name as the search space's keys give it (``--<key>=<value>`` on the command
#: line): no ``=``, so the word splits where the sweep put the ``=``.
FLAG_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}$")
#: The runtime's platform flags all start so (``airflow_tfk.runtime.flags.PREFIX``, which
#: the provider does not import; tests/sweep/test_trial_values.py holds them equal).
PLATFORM_FLAG_PREFIX = "tfk_"
#: The platform's flags (``--tfk_*``) a search space may tune: the hyperparameters. The
#: others say where a trial reads, writes and exports (``tfk_export_dir``,
#: ``tfk_model_name``, ``tfk_model_version``, which the sweep sets itself) or how it reports
#: progress, which the pruner reads: a trial that chose them could overwrite another
#: trial's model or hide from the pruner.
TUNABLE_PLATFORM_FLAGS = (
    "tfk_learning_rate",
    "tfk_batch_size",
    "tfk_steps",
    "tfk_seed",
    "tfk_steps_per_call",
    "tfk_checkpoint_every",
)


#: The tunable platform flags the runtime reads as integers (the others: a number).
_INTEGER_PLATFORM_FLAGS = (
    "tfk_batch_size",
    "tfk_steps",
    "tfk_seed",
    "tfk_steps_per_call",
    "tfk_checkpoint_every",
)


def _check_platform_type(name: str, p: ParamSpec, where: str) -> None:
    """A platform hyperparameter's values are of the type the runtime reads: a string
    choice (whatever it says) or a float for an integer flag would fail every trial that
    drew it, after others had run."""
    if name not in TUNABLE_PLATFORM_FLAGS:
        return
    integer = name in _INTEGER_PLATFORM_FLAGS
    noun = "an integer" if integer else "a number"
    if integer and p.kind is ParamKind.FLOAT:
        raise SpecError(f"{where}.type", f"--{name} reads {noun}: use type int (or categorical)", "float")
    for i, choice in enumerate(p.choices):
        if isinstance(choice, bool) or not isinstance(choice, int if integer else (int, float)):
            raise SpecError(f"{where}.choices[{i}]", f"--{name} reads {noun}", choice)


def _reserved(name: str) -> bool:
    """A key the sweep does not let a search space use: a platform flag other than the
    tunable ones, in any case or with ``-`` for ``_``, or a prefix of one (``t``, ``tfk``):
    a parser that matches abbreviations (argparse's default ``allow_abbrev``) reads
    ``--tfk=...`` as the platform flag it abbreviates."""
    if name in TUNABLE_PLATFORM_FLAGS:
        return False
    key = name.lower().replace("-", "_")
    return key.startswith(PLATFORM_FLAG_PREFIX) or PLATFORM_FLAG_PREFIX.startswith(key)


class ParamKind(str, enum.Enum):
    FLOAT = "float"
    INT = "int"
    CATEGORICAL = "categorical"


class Direction(str, enum.Enum):
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class SamplerKind(str, enum.Enum):
    TPE = "tpe"
    RANDOM = "random"
    GRID = "grid"


class PrunerKind(str, enum.Enum):
    MEDIAN = "median"
    NONE = "none"


def _choice(enum_type: type[enum.Enum], value: object, where: str) -> Any:
    try:
        return enum_type(value)
    except ValueError:
        names = ", ".join(str(m.value) for m in enum_type)
        raise SpecError(where, f"must be one of {names}", value) from None


def _number(value: object, where: str, *, integer: bool = False) -> float:
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    # An int is finite whatever its size (float() of 10**400 overflows); a float may not be.
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if isinstance(value, bool) or not ok or not finite:
        raise SpecError(where, "must be an integer" if integer else "must be a finite number", value)
    if abs(value) > MAX_MAGNITUDE:  # type: ignore[arg-type]
        raise SpecError(where, f"must be between -{MAX_MAGNITUDE:g} and {MAX_MAGNITUDE:g}", value)
    return value  # type: ignore[return-value]


def _count(value: object, where: str, minimum: int, maximum: int = MAX_TRIALS) -> int:
    number = int(_number(value, where, integer=True))
    if not minimum <= number <= maximum:
        raise SpecError(where, f"must be between {minimum} and {maximum}", value)
    return number


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(where, "must be a mapping", value)
    return value


def _reject_unknown(data: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", unknown_key(unknown[0], known))


def _named_choice(data: object, where: str, known: tuple[str, ...]) -> Mapping[str, Any]:
    """The fields of a sampler or pruner, which may be left out (every default), given by
    name alone (``tpe``), or given as a mapping of the ``known`` fields."""
    if data is None:
        return {}
    if isinstance(data, str):
        return {"name": data}
    data = _mapping(data, where)
    _reject_unknown(data, known, where)
    return data


@dataclass(frozen=True)
class ParamSpec:
    """One hyperparameter: its range, and the app flag it is passed as.

    :param kind: ``float``, ``int`` or ``categorical``.
    :param low: lower bound (float, int).
    :param high: upper bound (float, int), inclusive.
    :param log: sample on a log scale (float, int; needs ``low > 0``).
    :param step: a grid step (float, int; not with ``log``).
    :param choices: the values (categorical): strings, numbers or booleans (written as
        ``true``/``false``); not null, lists or mappings, which have no command-line spelling.
    """

    kind: ParamKind
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    @classmethod
    def from_dict(cls, data: object, where: str) -> ParamSpec:
        data = _mapping(data, where)
        _reject_unknown(data, ("type", "low", "high", "log", "step", "choices"), where)
        kind = _choice(ParamKind, data.get("type", "float"), f"{where}.type")
        if kind is ParamKind.CATEGORICAL:
            return cls._categorical(data, where)
        integer = kind is ParamKind.INT
        if "low" not in data or "high" not in data:
            raise SpecError(
                f"{where}.{'low' if 'low' not in data else 'high'}", f"is required for a {kind.value}"
            )
        low = _number(data["low"], f"{where}.low", integer=integer)
        high = _number(data["high"], f"{where}.high", integer=integer)
        if high < low:
            raise SpecError(f"{where}.high", f"must be at least low ({low})", high)
        log = data.get("log", False)
        if not isinstance(log, bool):
            raise SpecError(f"{where}.log", "must be true or false", log)
        if log and low <= 0:
            raise SpecError(f"{where}.low", "must be greater than 0 on a log scale", low)
        step = data.get("step")
        if step is not None:
            step = _number(step, f"{where}.step", integer=integer)
            if step <= 0 or log:
                raise SpecError(f"{where}.step", "must be greater than 0, and not with log: true", step)
        return cls(kind, low, high, log, step)

    @classmethod
    def _categorical(cls, data: Mapping[str, Any], where: str) -> ParamSpec:
        if "low" in data or "high" in data or "log" in data or "step" in data:
            raise SpecError(where, "a categorical takes only choices (no low, high, log or step)")
        choices = data.get("choices")
        if not isinstance(choices, (list, tuple)) or not choices:
            raise SpecError(f"{where}.choices", "must be a non-empty list", choices)
        # Optuna stores a choice as the index of the first one equal to it (1 == 1.0 ==
        # True): an equal later choice could never be a trial's value of its own. The
        # choices are strings, numbers and booleans, whose equal values hash alike, so one
        # dict finds each one's first equal in a single pass (not a scan per choice).
        firsts: dict[Any, int] = {}
        for i, c in enumerate(choices):
            _flag_value(c, f"{where}.choices[{i}]")
            first = firsts.setdefault(c, i)
            if first != i:
                raise SpecError(
                    f"{where}.choices[{i}]",
                    f"equals choices[{first}] ({choices[first]!r}); Optuna records both as the first, "
                    "so give each choice a value of its own (a string, to keep 1 and 1.0 apart)",
                    c,
                )
        return cls(ParamKind.CATEGORICAL, choices=tuple(choices))


@dataclass(frozen=True)
class PrunerSpec:
    """When a losing trial is stopped.

    :param name: ``median`` (stop a trial whose intermediate value is worse than the
        median of the finished trials' at the same step) or ``none``.
    :param n_startup_trials: no pruning until this many trials have finished.
    :param n_warmup_steps: no pruning of a trial before this training step.
    :param interval_steps: the steps at which trials are compared: multiples of this.
        A trial's value at ``k * interval_steps`` is its smoothed loss at its first
        progress line at or past that step, so trials whose lines fall on different steps
        (``parameter_server``, a late read) are still compared at the same ones. Default:
        a hundredth of the training's steps (the ``total_steps`` of its progress lines).
    """

    name: PrunerKind = PrunerKind.MEDIAN
    n_startup_trials: int = 3
    n_warmup_steps: int = 0
    interval_steps: int | None = None

    @classmethod
    def from_dict(cls, data: object, where: str) -> PrunerSpec:
        data = _named_choice(data, where, ("name", "n_startup_trials", "n_warmup_steps", "interval_steps"))
        d = cls()
        return cls(
            _choice(PrunerKind, data.get("name", d.name.value), f"{where}.name"),
            _count(data.get("n_startup_trials", d.n_startup_trials), f"{where}.n_startup_trials", 0),
            _count(data.get("n_warmup_steps", d.n_warmup_steps), f"{where}.n_warmup_steps", 0, 10**12),
            None
            if data.get("interval_steps") is None
            else _count(data["interval_steps"], f"{where}.interval_steps", 1, 10**12),
        )


@dataclass(frozen=True)
class SamplerSpec:
    """How the next trial's parameters are chosen.

    :param name: ``tpe`` (Optuna's default), ``random``, or ``grid`` (every point of a
        discrete search space once, in a random order; each parameter categorical, an int,
        or a float with a ``step``).
    :param seed: the sampler's seed: a new study with the same seed gives the same
        parameters. Whatever the sampler, no trial is given a point another trial of the
        study completed, was pruned at, runs or waits to run (a retry of the sweep
        continues the study, it does not repeat it); a sweep whose every point is taken
        stops there, short of ``n_trials``, and says so.
    """

    name: SamplerKind = SamplerKind.TPE
    seed: int | None = None

    @classmethod
    def from_dict(cls, data: object, where: str) -> SamplerSpec:
        data = _named_choice(data, where, ("name", "seed"))
        seed = data.get("seed")
        if seed is not None:
            seed = _count(seed, f"{where}.seed", 0, 2**32 - 1)
        return cls(_choice(SamplerKind, data.get("name", "tpe"), f"{where}.name"), seed)


_FIELDS = (
    "n_trials",
    "max_concurrent_trials",
    "search_space",
    "objective",
    "direction",
    "sampler",
    "pruner",
    "storage",
    "study_name",
    "model_versions",
    "poll_interval",
    "smoothing",
    "budget_core_hours",
)


def _search_space(data: Mapping[str, Any], where: str) -> dict[str, ParamSpec]:
    """The search space's parameters, every error of them at once."""
    from airflow_tfk.spec.decl import Errors

    space = _mapping(data.get("search_space"), f"{where}.search_space")
    if not space:
        raise SpecError(f"{where}.search_space", "must name at least one parameter")
    errors = Errors()
    params = {}
    for key, spec in space.items():
        name = str(key)
        path = f"{where}.search_space.{name}"
        if not FLAG_NAME.match(name) or _reserved(name):
            errors.add(
                SpecError(
                    path,
                    "must be an app flag name (letters, digits, '_', '-'; not tfk_* nor a prefix of "
                    f"it), or one of the platform's hyperparameters ({', '.join(TUNABLE_PLATFORM_FLAGS)})",
                )
            )
            continue
        try:
            params[name] = ParamSpec.from_dict(spec, path)
            _check_platform_type(name, params[name], path)
        except SpecError as exc:
            errors.add(exc)
    if not errors.items:
        errors.run(lambda: _check_params_env(params, f"{where}.search_space"))
    errors.raise_if_any()
    return params


@dataclass(frozen=True)
class SweepConfig:
    """A sweep of ``n_trials`` trainings of one cluster spec.

    :param n_trials: the study's budget: trials finished (completed, pruned or failed) in
        the study, over every try of the task and every sweep that opened it, not per try.
        A retry runs only what the budget has left; a trial interrupted by a kill of the
        sweep task does not count and is run again on the retry.
    :param max_concurrent_trials: clusters alive at once, at most.
    :param search_space: flag name -> :class:`ParamSpec`; trial values are passed to the
        app as one word ``--<flag>=<value>`` after the spec's own args (the last one wins;
        a value is always its flag's argument, never an option of its own), e.g.
        ``tfk_learning_rate`` (the runtime's ``--tfk_learning_rate``) or an app flag.
    :param objective: the metric to optimise, from what the app's ``after_train``
        returned (its metrics line), else from the evaluator's last metrics.
    :param direction: ``minimize`` or ``maximize`` the objective.
    :param sampler: :class:`SamplerSpec`.
    :param pruner: :class:`PrunerSpec`. Its intermediate values are the loss of the
        trial's progress lines (smoothed; negated when the objective is maximised, so
        that "better" points the same way for the pruner).
    :param storage: where the study lives: an SQLite file under the sweep root (relative:
        taken from it; the platform's ``[tfk] sweep_root``, else the local backend's
        ``<root>/.sweeps``) or a database URL the platform allows (``[tfk]
        sweep_storage_url_prefixes``); never Airflow's own database. Default: the sweep
        root's ``<study>.db``; on Kubernetes without a sweep root, required.
    :param study_name: default: the task instance's (dag, task, run, map index), so a
        retry of the task resumes it and another run starts afresh.
    :param model_versions: pass ``--tfk_model_version`` (the study's base + trial number,
        a large number) to every trial. Off by default: each trial's export takes the next
        free small version when it publishes (the rename is the claim, so concurrent
        trials never share one), and the sweep records the version each trial exported.
    :param poll_interval: seconds between two looks at the running trials.
    :param smoothing: weight of the newest loss in the running average reported to the
        pruner (1: the raw loss of each progress line).
    :param budget_core_hours: the most requested core-hours the sweep's trials may hold in
        all: no trial starts once the next would cross it (a trial is taken to hold the
        completed trials' mean; the first trials start before there is one). The XCom's
        ``usage`` says ``budget_reached``, each trial's ``core_seconds``, the total and what
        pruning saved. None: no budget.
    """

    n_trials: int
    search_space: Mapping[str, ParamSpec]
    max_concurrent_trials: int = 1
    objective: str = "loss"
    direction: Direction = Direction.MINIMIZE
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    pruner: PrunerSpec = field(default_factory=PrunerSpec)
    storage: str | None = None
    study_name: str | None = None
    model_versions: bool = False
    poll_interval: float = 2.0
    smoothing: float = 0.5
    budget_core_hours: float | None = None

    @classmethod
    def from_dict(cls, data: object, where: str = "sweep") -> SweepConfig:
        """The sweep block of ``data``; every error of it at once (a
        :class:`~airflow_tfk.core.errors.SpecErrors` when there are several), each naming
        its field."""
        from airflow_tfk.spec.decl import Errors

        data = _mapping(data, where)
        errors = Errors()
        read = errors.take
        read(lambda: _reject_unknown(data, _FIELDS, where))
        if "n_trials" not in data:
            errors.add(SpecError(f"{where}.n_trials", "is required: how many trials to run"))
        params = read(lambda: _search_space(data, where), {})
        sampler = read(lambda: SamplerSpec.from_dict(data.get("sampler"), f"{where}.sampler"))
        if sampler is not None and sampler.name is SamplerKind.GRID and params and not errors.items:
            read(lambda: _check_grid(params, where))
        values = {
            "n_trials": read(lambda: _count(data["n_trials"], f"{where}.n_trials", 1))
            if "n_trials" in data
            else None,
            "max_concurrent_trials": read(
                lambda: _count(data.get("max_concurrent_trials", 1), f"{where}.max_concurrent_trials", 1)
            ),
            "objective": read(lambda: _name(data.get("objective", "loss"), f"{where}.objective")),
            "direction": read(
                lambda: _choice(Direction, data.get("direction", "minimize"), f"{where}.direction")
            ),
            "pruner": read(lambda: PrunerSpec.from_dict(data.get("pruner"), f"{where}.pruner")),
            "storage": read(lambda: _storage(data.get("storage"), f"{where}.storage")),
            "study_name": read(lambda: _optional_name(data.get("study_name"), f"{where}.study_name")),
            "model_versions": read(
                lambda: _flag(data.get("model_versions", False), f"{where}.model_versions")
            ),
            "poll_interval": read(
                lambda: _bounded(data.get("poll_interval", 2.0), f"{where}.poll_interval", 0.01, 600)
            ),
            "smoothing": read(lambda: _bounded(data.get("smoothing", 0.5), f"{where}.smoothing", 0.01, 1.0)),
            "budget_core_hours": read(
                lambda: (
                    None
                    if data.get("budget_core_hours") is None
                    else _bounded(data["budget_core_hours"], f"{where}.budget_core_hours", 0.0001, 1e9)
                )
            ),
        }
        errors.raise_if_any()
        return cls(search_space=params, sampler=sampler, **values)

    def to_dict(self) -> dict[str, Any]:
        """The plain form (what :meth:`from_dict` reads back)."""
        space: dict[str, Any] = {}
        for name, p in self.search_space.items():
            if p.kind is ParamKind.CATEGORICAL:
                space[name] = {"type": "categorical", "choices": list(p.choices)}
            else:
                space[name] = {"type": p.kind.value, "low": p.low, "high": p.high, "log": p.log}
                if p.step is not None:
                    space[name]["step"] = p.step
        return {
            "n_trials": self.n_trials,
            "max_concurrent_trials": self.max_concurrent_trials,
            "search_space": space,
            "objective": self.objective,
            "direction": self.direction.value,
            "sampler": {"name": self.sampler.name.value, "seed": self.sampler.seed},
            "pruner": {
                "name": self.pruner.name.value,
                "n_startup_trials": self.pruner.n_startup_trials,
                "n_warmup_steps": self.pruner.n_warmup_steps,
                "interval_steps": self.pruner.interval_steps,
            },
            "storage": self.storage,
            "study_name": self.study_name,
            "model_versions": self.model_versions,
            "poll_interval": self.poll_interval,
            "smoothing": self.smoothing,
            "budget_core_hours": self.budget_core_hours,
        }


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(where, "must be a non-empty string", value)
    return value


def _name(value: object, where: str) -> str:
    """A name that is shown in logs, tables and the UI: one printable line."""
    from airflow_tfk.core.printable import control_character

    text = _text(value, where)
    bad = control_character(text)
    if bad is not None:
        raise SpecError(where, f"must not contain the control character {bad!r}", value)
    if len(text) > MAX_NAME_CHARS:
        raise SpecError(where, f"must be at most {MAX_NAME_CHARS} characters", value)
    return text


def _optional_name(value: object, where: str) -> str | None:
    return None if value is None else _name(value, where)


def _storage(value: object, where: str) -> str | None:
    """A database URL, an absolute path, or a relative path that stays under the local
    backend's root (no '..'): a training file does not choose where on the Airflow
    worker's disk a sweep writes."""
    from airflow_tfk.spec.checks import path_text

    if value is None:
        return None
    if isinstance(value, str) and "://" not in value:
        path_text(value, where, kind="any")
    return _name(value, where)


def _check_grid(params: Mapping[str, ParamSpec], where: str) -> None:
    """A grid search takes every point of its space: each parameter must have a finite
    set of values, and the grid a size that can be listed."""
    from airflow_tfk.sweep.distinct import MAX_ENUMERATED_POINTS, _count

    size = 1
    for name, p in params.items():
        n = _count(p)
        if n is None:
            raise SpecError(
                f"{where}.search_space.{name}",
                "is a continuous float; sampler grid needs a step (or make it categorical)",
            )
        size *= n
    if size > MAX_ENUMERATED_POINTS:
        raise SpecError(
            f"{where}.sampler.name",
            f"grid: the search space has {size:,} points, more than {MAX_ENUMERATED_POINTS:,}; "
            "use tpe or random",
            "grid",
        )


def _check_params_env(params: Mapping[str, ParamSpec], where: str) -> None:
    """Every trial's parameters also travel as one JSON environment string
    (``SWEEP_TRIAL_PARAMS``): its longest form must fit one string of an exec."""
    import json

    from airflow_tfk.spec.checks import _exec_string
    from airflow_tfk.sweep.trials import ENV_PARAMS

    longest = 2 + sum(
        len(json.dumps(name)) + 3 + max((len(json.dumps(c)) for c in p.choices), default=32)
        for name, p in params.items()
    )
    _exec_string(len(ENV_PARAMS) + 1 + longest, where, f"{longest:,} characters of JSON")


def _flag_value(value: object, where: str) -> str:
    """A categorical choice as the trials' command lines carry it (``--<flag>=<value>``),
    checked as the spec checks its args: a choice the sampler picks late must not fail a
    trial after others have run."""
    from airflow_tfk.spec.checks import _str_list
    from airflow_tfk.sweep.trials import flag_value

    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_MAGNITUDE:
        raise SpecError(where, f"must be between -{MAX_MAGNITUDE:g} and {MAX_MAGNITUDE:g}", value)
    text = flag_value(value, where)
    try:
        _str_list([text], "args")
    except SpecError as exc:
        raise SpecError(where, exc.rule, value) from None
    return text


def _flag(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(where, "must be true or false", value)
    return value


def _bounded(value: object, where: str, low: float, high: float) -> float:
    number = float(_number(value, where))
    if not low <= number <= high:
        raise SpecError(where, f"must be between {low} and {high}", value)
    return number
