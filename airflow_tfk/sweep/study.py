"""The Optuna side of a sweep: storage, study, sampler, pruner, the table of trials.

Optuna is imported inside the functions: a DAG file that builds a sweep task never
imports it (ruff's TID253 bans it at module level).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.constants import BackendKind
from airflow_tfk.sweep.config import Direction, ParamKind, ParamSpec, PrunerKind, SamplerKind, SweepConfig
from airflow_tfk.sweep.storage import ROOT_OPTION, SWEEPS_DIR, URLS_OPTION, StoragePolicy, resolve_storage

if TYPE_CHECKING:
    import optuna

#: Study attribute: the export version of trial 0 (trial N exports this + N). Kept in the
#: study, so a retry of the sweep gives the trials it runs versions of the same series.
VERSION_BASE = "tfk_version_base"
#: Trial attributes the sweep records.
CLUSTER = "tfk_cluster"
STEPS = "tfk_steps"
MODEL_VERSION = "tfk_model_version"
EXPORT = "tfk_export"
METRICS = "tfk_metrics"
ERROR = "tfk_error"
PRUNED_AT = "tfk_pruned_at_step"
#: How a pruning went: the age of the progress line it was decided on, the seconds the
#: end took, the last step the trial reported (where its logs outlive it).
PRUNING = "tfk_pruning"
#: What the trial's cluster held: its usage total (``Figures.to_dict()``), read at its end.
USAGE = "tfk_usage"
#: A trial that was running when its sweep task stopped: failed, and run again (its
#: parameters enqueued); it does not count towards ``n_trials``.
INTERRUPTED = "tfk_interrupted"
RERUN_OF = "tfk_rerun_of"
#: How long opening the study waits out other openers of the same file (another sweep,
#: a reader, all setting up a new file's tables, or writing): a busy machine stretches
#: each of their turns.
OPEN_WAIT_SECONDS = 60.0


def storage_url(
    storage: str | None,
    backend_kind: str,
    local_root: str | None,
    study_name: str,
    platform: StoragePolicy | None = None,
) -> str:
    """The study's storage as a database URL, checked against the platform's policy
    (:mod:`~airflow_tfk.sweep.storage`) before anything is created.

    A path, or an ``sqlite:///`` URL, is an SQLite file under the sweep root: the
    platform's (``[tfk] sweep_root``), else the local backend's ``<root>/.sweeps``; a
    relative path is taken from it, and without ``storage`` the study is
    ``<sweep root>/<study>.db``. Any other URL must be one the platform allows. On
    Kubernetes without a sweep root the user must say where: the sweep task runs in an
    Airflow worker whose disk a retry may not see.
    """
    platform = platform or StoragePolicy(None)
    root = platform.root
    if root is None and backend_kind == BackendKind.LOCAL and local_root is not None:
        root = os.path.join(local_root, SWEEPS_DIR)
    required = (
        "is required on the kubernetes backend: a database URL the platform allows "
        f"({URLS_OPTION}), or the platform sets {ROOT_OPTION} (a volume every Airflow worker "
        "mounts), so that a retried sweep task finds its study"
    )
    return resolve_storage(storage, study_name, replace(platform, root=root), required=required)


def distributions(config: SweepConfig) -> dict[str, Any]:
    """Optuna's distribution of each parameter of the search space."""
    return {name: _distribution(p) for name, p in config.search_space.items()}


def _distribution(p: ParamSpec) -> Any:
    import optuna

    if p.kind is ParamKind.CATEGORICAL:
        return optuna.distributions.CategoricalDistribution(list(p.choices))
    if p.kind is ParamKind.INT:
        return optuna.distributions.IntDistribution(
            int(p.low or 0), int(p.high or 0), log=p.log, step=int(p.step or 1)
        )
    return optuna.distributions.FloatDistribution(
        float(p.low or 0), float(p.high or 0), log=p.log, step=p.step
    )


def make_sampler(config: SweepConfig, trials_held: int = 0) -> Any:
    """The sweep's sampler for a study holding ``trials_held`` trials, wrapped so that it
    never proposes a point the study holds (:mod:`~airflow_tfk.sweep.distinct`)."""
    import optuna

    from airflow_tfk.sweep.distinct import DistinctSampler, sampler_seed

    seed = config.sampler.seed
    inner_seed = sampler_seed(seed, trials_held)
    inner: Any
    if config.sampler.name is SamplerKind.GRID:
        inner = None
    elif config.sampler.name is SamplerKind.RANDOM:
        inner = optuna.samplers.RandomSampler(seed=inner_seed)
    else:
        inner = optuna.samplers.TPESampler(seed=inner_seed)
    return DistinctSampler(inner, config, seed)


def make_pruner(config: SweepConfig) -> Any:
    import optuna

    p = config.pruner
    if p.name is PrunerKind.NONE:
        return optuna.pruners.NopPruner()
    # The sweep reports a running trial only at its newest grid point (interval_steps
    # apart, sweep.curve), so Optuna's own interval would skip points it never sees.
    return optuna.pruners.MedianPruner(
        n_startup_trials=p.n_startup_trials, n_warmup_steps=p.n_warmup_steps, interval_steps=1
    )


class StudyStorageError(RuntimeError):
    """The study's storage cannot be used: unreadable, not an Optuna study, or a study
    made with other settings. Names the file (or URL) and what to do."""


def open_study(config: SweepConfig, url: str, study_name: str) -> optuna.study.Study:
    """Create the study, or load it when a previous try of the task made it.

    A storage that is not a usable study raises :class:`StudyStorageError`; a fresh file
    that another process (a second sweep, a reader) is setting up at the same moment is
    waited for, not an error."""
    import optuna
    import sqlalchemy.exc

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    deadline = time.monotonic() + OPEN_WAIT_SECONDS
    attempt = 0
    while True:
        attempt += 1
        try:
            study = optuna.create_study(
                storage=url,
                study_name=study_name,
                direction=config.direction.value,
                sampler=make_sampler(config),
                pruner=make_pruner(config),
                load_if_exists=True,
            )
            break
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.IntegrityError) as exc:
            # Two openers of a new file both create its tables ("already exists", a
            # duplicate schema version), or one waits for the other's write ("locked").
            transient = any(w in str(exc) for w in ("already exists", "UNIQUE", "locked"))
            if not transient or time.monotonic() > deadline:
                raise _storage_error(url, study_name, exc) from None
            time.sleep(min(1.0, 0.1 * attempt))
        except Exception as exc:  # any failure to open is the storage's, said once
            raise _storage_error(url, study_name, exc) from None
    # Optuna loads an existing study whatever direction it is asked for: a sweep that
    # maximises would be pruned and ranked as the minimising one it found.
    made = study.direction.name.lower()
    if made != config.direction.value:
        raise StudyStorageError(
            f"sweep.storage: study {study_name!r} in {display_url(url)} was made to {made} its "
            f"objective, this sweep is to {config.direction.value} it; give this sweep its own "
            "sweep.study_name"
        )
    # Made afresh, a seeded sampler would start its stream again and propose what the
    # study's first trials trained: a reopened study's sampler gets a seed of its own.
    study.sampler = make_sampler(config, len(study.get_trials(deepcopy=False)))
    if VERSION_BASE not in study.user_attrs:
        # Milliseconds: two studies made seconds apart still get disjoint version series.
        study.set_user_attr(VERSION_BASE, int(time.time() * 1000))
    return study


def _storage_error(url: str, study_name: str, exc: BaseException) -> StudyStorageError:
    where = display_url(url)
    cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    hint = (
        "the file is damaged or not an Optuna study; move it aside (the sweep then starts "
        "a new study and runs every trial again) or set sweep.storage to another file"
        if url.startswith("sqlite:")
        else "check the database and its credentials, or set sweep.storage to another one"
    )
    return StudyStorageError(f"sweep.storage: cannot open study {study_name!r} in {where}: {cause}; {hint}")


def display_url(url: str) -> str:
    """The storage as the user knows it: the path of an SQLite file, a URL without its
    password."""
    from urllib.parse import urlsplit, urlunsplit

    if url.startswith("sqlite:///"):
        return url[len("sqlite:///") :]
    try:
        parts = urlsplit(url)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
            return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        pass
    return url


def report_points(trial: optuna.trial.Trial, points: Mapping[int, float]) -> None:
    """Write a running trial's intermediate values (step -> value) in one transaction.

    ``trial.report`` commits each value on its own, and every commit of an SQLite study
    takes the file's write lock and waits for the disk: a finished trial's whole curve
    (a hundred points) written that way keeps the judge's reads of the study, and so its
    pruning decisions, waiting behind a hundred commits. One commit makes that one wait.
    A storage other than Optuna's RDB storage gets one ``report`` per value."""
    if not points:
        return
    values = {int(k): float(v) for k, v in points.items()}
    storage = trial.study._storage
    rdb = getattr(storage, "_backend", storage)
    try:  # Optuna's SQL storage and its rows, checked before anything is written
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import RDBStorage, _create_scoped_session

        row_of = models.TrialIntermediateValueModel
        to_stored = row_of.intermediate_value_to_stored_repr
        batched = isinstance(rdb, RDBStorage)
    except (ImportError, AttributeError):
        batched = False
    if not batched:
        for step, value in sorted(values.items()):
            trial.report(value, step)
        return
    trial_id = trial._trial_id
    with _create_scoped_session(rdb.scoped_session, True) as session:
        state = models.TrialModel.find_or_raise_by_id(trial_id, session).state
        rdb.check_trial_is_updatable(trial_id, state)
        rows = {r.step: r for r in session.query(row_of).filter(row_of.trial_id == trial_id)}
        for step, value in sorted(values.items()):
            stored, kind = to_stored(value)
            row = rows.get(step)
            if row is None:
                row = row_of(trial_id=trial_id, step=step)
                session.add(row)
            row.intermediate_value, row.intermediate_value_type = stored, kind
    cached = getattr(trial, "_cached_frozen_trial", None)
    if cached is not None:  # what the trial object itself says it reported
        cached.intermediate_values.update(values)


def counted(trial: optuna.trial.FrozenTrial) -> bool:
    """Does this trial count towards ``n_trials``? Finished ones do; an interrupted one
    is run again instead."""
    import optuna

    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
    return trial.state in states and not trial.user_attrs.get(INTERRUPTED)


def trial_row(t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """One row of the table of trials (plain JSON for XCom)."""
    attrs = t.user_attrs
    seconds = None
    if t.datetime_start is not None and t.datetime_complete is not None:
        seconds = round((t.datetime_complete - t.datetime_start).total_seconds(), 1)
    value = t.value if t.state.name == "COMPLETE" else None
    return {
        "number": t.number,
        "params": dict(t.params),
        "value": None if value is None or not math.isfinite(value) else value,
        "state": t.state.name,
        "steps": attrs.get(STEPS),
        "seconds": seconds,
        "cluster": attrs.get(CLUSTER),
        "model_version": attrs.get(MODEL_VERSION) if t.state.name == "COMPLETE" else None,
        "core_seconds": _core_seconds(attrs.get(USAGE)),
        "note": attrs.get(ERROR)
        or (f"pruned at step {attrs[PRUNED_AT]}" if PRUNED_AT in attrs else None)
        or ("interrupted; run again" if attrs.get(INTERRUPTED) else None),
    }


def trial_core_seconds(t: Any) -> float | None:
    """What a trial's cluster held, as recorded at its end (None: not recorded)."""
    return _core_seconds(t.user_attrs.get(USAGE))


def _core_seconds(usage: Any) -> float | None:
    """A trial's recorded core-seconds; None for anything but a finite number >= 0 (the
    study is a file: what it holds is read as data)."""
    value = usage.get("core_seconds") if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def format_table(rows: Sequence[Mapping[str, Any]], objective: str) -> str:
    """The table of trials as text, for the task log."""
    head = ("trial", "state", objective, "steps", "seconds", "params", "note")
    lines = [head]
    for r in rows:
        value = "" if r["value"] is None else f"{r['value']:.6g}"
        params = ", ".join(f"{k}={_short(v)}" for k, v in r["params"].items())
        lines.append(
            (
                str(r["number"]),
                r["state"],
                value,
                "" if r["steps"] is None else str(r["steps"]),
                "" if r["seconds"] is None else f"{r['seconds']:.1f}",
                params,
                r["note"] or "",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def best_row(rows: Sequence[Mapping[str, Any]], direction: Direction) -> Mapping[str, Any] | None:
    """The completed trial with the best value (the lowest number among equals)."""
    done = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None]
    if not done:
        return None
    sign = 1.0 if direction is Direction.MINIMIZE else -1.0
    return min(done, key=lambda r: (sign * r["value"], r["number"]))
