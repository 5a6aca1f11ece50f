"""One trial's cluster: the sweep's spec with the trial's name, flags and environment.

Pure: no Optuna, no Airflow, no backend.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from airflow_tfk import naming
from airflow_tfk.constants import NAME_PREFIX
from airflow_tfk.naming import RunIdentity
from airflow_tfk.spec import ROLES, TFClusterSpec

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
    """How a parameter value is written on the command line (refused as the spec refuses it)."""
    from airflow_tfk._spec_checks import flag_text

    return flag_text(value, where)


def trial_flags(params: Mapping[str, Any], model_version: int | None) -> tuple[str, ...]:
    """``--<flag> <value>`` for each parameter (and the trial's export version)."""
    flags: list[str] = []
    for name, value in params.items():
        flags += [f"--{name}", flag_value(value, f"sweep.search_space.{name}")]
    if model_version is not None:
        flags += ["--tfk_model_version", str(model_version)]
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
