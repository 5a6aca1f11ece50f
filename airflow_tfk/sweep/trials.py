"""One trial's cluster: the sweep's spec with the trial's name, flags and environment.

Pure: no Optuna, no Airflow, no backend.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_tfk.core import naming
from airflow_tfk.core.constants import NAME_PREFIX
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.cluster import ROLES, TFClusterSpec

if TYPE_CHECKING:
    from airflow_tfk.sweep.config import SweepConfig

#: Room left in a generated base name for the ``-t<number>`` suffix of its trials.
TRIAL_SUFFIX_ROOM = 6
#: The trial's number and parameters, as JSON, in every task's environment (for apps that
#: read their hyperparameters from the environment rather than from flags; TFK_* is the
#: platform's own).
ENV_TRIAL = "SWEEP_TRIAL_NUMBER"
ENV_PARAMS = "SWEEP_TRIAL_PARAMS"


def base_name(identity: RunIdentity, prefix: str = NAME_PREFIX) -> str:
    """The sweep's deterministic base name (a retry finds its trials' clusters by it),
    short enough for the trial suffix."""
    return naming.cluster_name_for(
        identity.dag_id,
        identity.task_id,
        identity.run_id,
        identity.map_index,
        prefix,
        max_length=30 - TRIAL_SUFFIX_ROOM,
    )


def trial_name(base: str, number: int) -> str:
    return f"{base}-t{number}"


def flag_value(value: Any, where: str = "sweep.search_space") -> str:
    """How a parameter value is written on the command line (refused as the spec refuses it).

    ``--``, alone of all texts, does not reach the app: argparse drops it from a flag's
    value (``--opt=--`` reads as an empty list, ``--tfk_seed=--`` as no number)."""
    from airflow_tfk.core.errors import SpecError
    from airflow_tfk.spec.checks import flag_text

    text = flag_text(value, where)
    if text == "--":
        raise SpecError(where, "must not be '--': argparse drops it from a flag's value", value)
    return text


def trial_flags(params: Mapping[str, Any], model_version: int | None) -> tuple[str, ...]:
    """One ``--<flag>=<value>`` word for each parameter, then the trial's export version.

    One word, never ``--<flag> <value>``: a value is data, and as a word of its own a value
    that looks like an option (``--tfk_model_name=victim``, ``--``, ``-h``) is read as one,
    so a trial could export under another model's name or path. argparse and absl split
    ``--<flag>=<value>`` at its first ``=`` and the part before it is a search-space key
    (:data:`~airflow_tfk.sweep.config.FLAG_NAME`: no ``=``, never a platform flag the sweep
    does not let it tune, nor a prefix of one), so whatever the value says it is that
    flag's argument. The platform's own flag comes last: the last one wins."""
    flags = [f"--{name}={flag_value(value, f'sweep.search_space.{name}')}" for name, value in params.items()]
    if model_version is not None:
        flags.append(f"--tfk_model_version={model_version}")
    return tuple(flags)


def trial_spec(
    spec: TFClusterSpec,
    name: str,
    number: int,
    params: Mapping[str, Any],
    model_version: int | None = None,
) -> TFClusterSpec:
    """The spec of trial ``number``: renamed, the flags appended to the args of every
    task (a role that overrides the args gets them too), the parameters in the env.

    Appended, so they win over the same flags in the spec's own args (argparse keeps the
    last one)."""
    flags = trial_flags(params, model_version)
    env = {**spec.env, ENV_TRIAL: str(number), ENV_PARAMS: json.dumps(dict(params), sort_keys=True)}
    roles: dict[str, Any] = {}
    for role in ROLES:
        role_spec = getattr(spec, role, None)
        if role_spec is not None and role_spec.args is not None:
            roles[role] = dataclasses.replace(role_spec, args=(*role_spec.args, *flags))
    return dataclasses.replace(spec, name=name, args=(*spec.args, *flags), env=env, **roles)


#: the longest spellings a sampled value can have on a command line: a double's repr
#: (``-2.2250738585072014e-308``) and an int64 export version
_LONGEST_FLOAT = -2.2250738585072014e-308
_LONGEST_VERSION = 2**63 - 1


def longest_params(config: SweepConfig) -> dict[str, Any]:
    """For each parameter of the search space, the value with the longest command-line and
    JSON spelling a trial can get."""
    from airflow_tfk.spec.checks import flag_text
    from airflow_tfk.sweep.config import ParamKind

    out: dict[str, Any] = {}
    for name, p in config.search_space.items():
        if p.kind is ParamKind.CATEGORICAL:

            def size(choice: Any, where: str = name) -> int:
                return len(flag_text(choice, where).encode()) + len(json.dumps(choice))

            out[name] = max(p.choices, key=size)
        elif p.kind is ParamKind.INT:
            out[name] = max(int(p.low or 0), int(p.high or 0), key=lambda v: len(str(v)))
        else:
            out[name] = _LONGEST_FLOAT
    return out


def check_trials_fit(spec: TFClusterSpec, config: SweepConfig, base: str | None = None) -> None:
    """Refuse, before any trial runs, a cluster spec that its trials' specs would break:
    the spec of the trial with the longest name, flags and ``SWEEP_TRIAL_*`` variables
    goes through every rule a trial's spec meets when it starts (argument and environment
    bounds, the final exec's size on either backend), and its first error is raised naming
    the cluster's field.

    ``base``: the trials' base name (default: the spec's name)."""
    from airflow_tfk.core.errors import SpecError

    params = longest_params(config)
    number = 10 ** (len(str(config.n_trials)) + 1) - 1  # reruns of interrupted trials count on
    version = _LONGEST_VERSION if config.model_versions else None
    added = sum(len(f.encode()) + 1 for f in trial_flags(params, version))
    try:
        trial_spec(spec, trial_name(base or spec.name, number), number, params, version)
    except SpecError as exc:
        first = (getattr(exc, "errors", None) or [exc])[0]
        raise SpecError(
            first.field,
            f"with a sweep trial's flags appended (up to {added:,} bytes of --flag=value) and its "
            f"{ENV_TRIAL}/{ENV_PARAMS} variables set: {first.rule}",
            first.value,
        ) from None
