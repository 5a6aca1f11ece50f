"""The training file format: one YAML file = one training = one DAG.

```yaml
dag_id: digits_nightly            # default: the file name without .yaml
description: Nightly digits classifier
schedule: "0 3 * * *"             # cron, a preset (@daily, @hourly, @once...), or null: manual only
start_date: 2026-01-01
previous_run_policy: kill_previous  # allow | kill_previous | skip | wait
max_duration_minutes: 60          # execution_timeout + the cluster's max_duration_seconds
retries: 1
owners: [ml-platform]
tags: [digits]
backend: kubernetes               # kubernetes | local (default: $TFK_BACKEND)
kubernetes_conn_id: kubernetes_default
params:                           # the "Trigger DAG" form; refer to them as {{ params.NAME }}
  steps: {default: 600, type: integer, minimum: 1, title: Training steps}
cluster:                          # a TFClusterSpec (airflow-tfk render's format); name optional
  image: airflow-tfk/training:2.21.0
  mode: parameter_server
  command: [python, -m, airflow_tfk.runtime.examples.digits_app]
  args: [--tfk_steps, "{{ params.steps }}"]
  chief: {replicas: 1}
  ps: {replicas: 1}
  worker: {replicas: 2}
tensorboard: true                 # or the TensorBoardOperator's options
publish: {model_name: digits}     # the PublishModelOperator's options
sweep:                            # optional: a hyperparameter sweep instead of one training
  n_trials: 12                    # (TFSweepOperator's settings; task "sweep" replaces "train")
  search_space: {tfk_learning_rate: {type: float, low: 0.0001, high: 0.3, log: true}}
```

This module checks the file's own keys and delegates each block to the class that owns
it: the ``cluster`` block is validated by :class:`TFClusterSpec` itself (so fields other
engineers add to the spec work here unchanged), and ``publish``/``tensorboard`` accept
exactly the keyword arguments of their operators' ``__init__`` (read from the signature,
so an option added to an operator, such as a publish quality gate, passes straight
through). Nothing is built here; Airflow-side checks (Params, the schedule) happen in
:mod:`airflow_tfk.dagfactory.builder`, and ``airflow-tfk validate`` runs both.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk import defaults
from airflow_tfk.constants import (
    CLEANUP,
    KUBERNETES_CONN_ID,
    PROGRESS_INTERVAL_SECONDS,
    STALL_SECONDS,
    Cleanup,
)
from airflow_tfk.errors import SpecError
from airflow_tfk.run_policy import PreviousRunPolicy
from airflow_tfk.stall import check_stall_seconds

#: the task ids of the generated DAG
TRAIN_TASK, PUBLISH_TASK, TENSORBOARD_TASK, SWEEP_TASK = "train", "publish", "tensorboard", "sweep"

PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
BACKENDS = ("kubernetes", "local")
# Airflow's dag_id alphabet (KEY_REGEX), at most 250 characters.
# Matched with fullmatch: "$" would also accept a trailing newline.
_DAG_ID = re.compile(r"[\w.-]{1,250}")
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_PARAM_REF = re.compile(r"\bparams\.([A-Za-z_][A-Za-z0-9_]*)")
_WHOLE_PARAM = re.compile(r"^\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
DEFAULT_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

#: JSON-schema and Airflow form keywords a Param may carry (a typo such as ``minimun``
#: would otherwise be ignored by jsonschema and let any value through).
PARAM_KEYS = frozenset(
    {
        "default",
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "required",
        "additionalProperties",
        "examples",
        "title",
        "description",
        "description_md",
        "section",
        "values_display",
    }
)
_JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string"}

# Keys of the operators' __init__ that the training file sets itself.
_MANAGED = frozenset({"backend", "backend_config", "kubernetes_conn_id", "task_id", "action", "kwargs"})


@dataclass(frozen=True)
class TrainingFile:
    """A validated training file, as plain data (no Airflow objects).

    :param dag_id: the DAG's id.
    :param source: the file it came from (shown in the DAG's docs and in errors).
    :param cluster: the cluster spec's fields as written (templates kept; ``name``
        optional: derived from the task instance, so a retry reattaches).
    :param schedule: a cron expression, a preset, assets (see
        :mod:`~airflow_tfk.dagfactory.asset_schedule`) or ``None`` (manual only).
    :param params: name -> ``{"default": ..., <JSON schema keywords>}``.
    :param publish: the PublishModelOperator's keyword arguments, or ``None``.
    :param tensorboard: the TensorBoardOperator's keyword arguments, or ``None``.
    :param sweep: a :class:`~airflow_tfk.sweep.config.SweepConfig` mapping: the DAG runs a
        sweep of the cluster (task ``sweep``) instead of one training; ``max_duration_minutes``
        then bounds each trial, not the task.
    """

    dag_id: str
    source: str
    cluster: dict[str, Any]
    description: str | None = None
    schedule: str | dict[str, Any] | None = None
    start_date: dt.datetime = DEFAULT_START
    catchup: bool = False
    max_active_runs: int = 1
    previous_run_policy: str = PreviousRunPolicy.ALLOW.value
    max_duration_minutes: int | None = None
    retries: int = 0
    retry_delay_seconds: int = 300
    owners: tuple[str, ...] = ("airflow",)
    tags: tuple[str, ...] = ()
    backend: str = "kubernetes"
    kubernetes_conn_id: str = KUBERNETES_CONN_ID
    backend_config: dict[str, Any] | None = None
    deferrable: bool = False
    progress_interval: float = PROGRESS_INTERVAL_SECONDS
    stall_seconds: float = STALL_SECONDS
    cleanup: str = "ps"
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    publish: dict[str, Any] | None = None
    tensorboard: dict[str, Any] | None = None
    sweep: dict[str, Any] | None = None

    @property
    def dagrun_timeout_minutes(self) -> int | None:
        # The training's own limit plus room for TensorBoard and publishing around it; a
        # sweep runs many trainings, each bounded by its cluster's deadline.
        if self.max_duration_minutes is None or self.sweep is not None:
            return None
        return self.max_duration_minutes + 10


# -- small checks, each naming the field ---------------------------------------------------


def _bool(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(key, "must be true or false", value)
    return value


def _int(data: Mapping[str, Any], key: str, default: int | None, lo: int, hi: int) -> int | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SpecError(key, f"must be an integer between {lo} and {hi}", value)
    return value


def control_character(text: str, *, multiline: bool = False) -> str | None:
    """The first character of ``text`` a terminal, a log line or the UI would not show as
    itself (control, format such as a bidi override, unassigned), or None."""
    for ch in text:
        if not ch.isprintable() and not (multiline and ch in "\n\t"):
            return ch
    return None


def printable(text: str) -> str:
    """``text`` with every character :func:`control_character` would name escaped
    (``\\n``, ``\\x1b``, ``\\u202e``), so it prints as one line that shows what it holds."""
    if control_character(text) is None:
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _str(
    data: Mapping[str, Any], key: str, default: str | None, max_len: int = 4096, *, multiline: bool = False
) -> str | None:
    value = data.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > max_len:
        raise SpecError(key, f"must be a non-empty string of at most {max_len} characters", value)
    bad = control_character(value, multiline=multiline)
    if bad is not None:
        raise SpecError(key, f"must not contain the control character {bad!r}", value)
    return value


def _str_list(data: Mapping[str, Any], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise SpecError(key, "must be a list of strings", value)
    for i, item in enumerate(value):
        if not isinstance(item, str) or not 1 <= len(item) <= 100 or control_character(item) is not None:
            raise SpecError(f"{key}[{i}]", "must be a non-empty string of at most 100 characters", item)
    return tuple(value)


def _mapping(data: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SpecError(key, "must be a mapping", value)
    return dict(value)


def _start_date(value: object) -> dt.datetime:
    if value is None:
        return DEFAULT_START
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            raise SpecError("start_date", "must be a date such as 2026-01-01", value) from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    raise SpecError("start_date", "must be a date such as 2026-01-01", value)


def _schedule(value: object) -> str | dict[str, Any] | None:
    if value is None:
        return None
    from airflow_tfk.dagfactory.asset_schedule import is_asset_schedule, parse_asset_schedule

    if is_asset_schedule(value):
        return parse_asset_schedule(value)
    if not isinstance(value, str) or not value.strip():
        raise SpecError("schedule", "must be a cron expression, a preset such as @daily, or null", value)
    value = value.strip()
    if value.startswith("@") and value not in PRESETS:
        raise SpecError("schedule", f"unknown preset (known: {', '.join(PRESETS)})", value)
    # Cron syntax is checked by Airflow's own timetable when the DAG is built.
    return value


# -- the blocks -----------------------------------------------------------------------------


def _params(value: object) -> dict[str, dict[str, Any]]:
    from airflow_tfk.dagfactory.patterns import check_schema_patterns

    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError("params", "must be a mapping of name -> default or {default: ..., type: ...}", value)
    out: dict[str, dict[str, Any]] = {}
    for name, definition in value.items():
        where = f"params.{name}"
        if not isinstance(name, str) or not _PARAM_NAME.fullmatch(name):
            raise SpecError(where, "must be a name of letters, digits and '_' (used as params.NAME)")
        if isinstance(definition, Mapping):
            unknown = sorted(set(definition) - PARAM_KEYS)
            if unknown:
                raise SpecError(
                    f"{where}.{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(PARAM_KEYS))})"
                )
            check_schema_patterns({k: v for k, v in definition.items() if k != "default"}, where)
            out[name] = dict(definition)
        elif definition is None or isinstance(definition, (bool, int, float, str)):
            # Shorthand ``steps: 600``: the default, typed after it.
            out[name] = {"default": definition}
            if definition is not None:
                out[name]["type"] = _JSON_TYPE[type(definition)]
        else:
            raise SpecError(where, "must be a default value or a mapping such as {default: 1, type: integer}")
    return out


def param_refs(value: Any, where: str) -> list[tuple[str, str]]:
    """``(field, param name)`` of every ``params.NAME`` in the strings of ``value``."""
    found: list[tuple[str, str]] = []
    if isinstance(value, str):
        if "{{" in value or "{%" in value:
            found.extend((where, m.group(1)) for m in _PARAM_REF.finditer(value))
    elif isinstance(value, Mapping):
        for k, v in value.items():
            found.extend(param_refs(v, f"{where}.{k}" if where else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found.extend(param_refs(v, f"{where}[{i}]"))
    return found


def with_param_defaults(value: Any, params: Mapping[str, Mapping[str, Any]]) -> Any:
    """``value`` with every whole-value ``"{{ params.NAME }}"`` replaced by that Param's
    default, so the spec can be validated at parse time without rendering a template.

    (At run time Airflow renders the real values natively and the operator validates the
    rendered spec again, before anything is created.)
    """
    if isinstance(value, str):
        m = _WHOLE_PARAM.match(value)
        if m and m.group(1) in params and "default" in params[m.group(1)]:
            return params[m.group(1)]["default"]
        return value
    if isinstance(value, Mapping):
        return {k: with_param_defaults(v, params) for k, v in value.items()}
    if isinstance(value, list):
        return [with_param_defaults(v, params) for v in value]
    return value


@functools.cache
def _keywords(operator: type) -> frozenset[str]:
    """The keyword-only parameters of an operator's ``__init__`` the file may set."""
    import inspect

    return (
        frozenset(
            name
            for name, p in inspect.signature(operator).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        )
        - _MANAGED
    )


def _operator_options(value: object, key: str, operator: type, *, true_means: dict[str, Any]) -> dict | None:
    """The keyword arguments of one operator block; unknown keys are errors."""

    if value is None or value is False:
        return None
    if value is True:
        return dict(true_means)
    if not isinstance(value, Mapping):
        raise SpecError(key, "must be true, false or a mapping of the operator's options", value)
    accepted = _keywords(operator)
    unknown = sorted(set(value) - accepted)
    if unknown:
        raise SpecError(f"{key}.{unknown[0]}", f"unknown key (allowed: {', '.join(sorted(accepted))})")
    if "base_path" in value:  # a local directory instead of the cluster's claim
        return dict(value)
    return {**true_means, **dict(value)}


def _backend_config(data: Mapping[str, Any], backend: str) -> dict[str, Any] | None:
    """``backend_config``: only the options of the chosen backend (a typo is not ignored)."""
    import inspect

    config = _mapping(data, "backend_config")
    if not config:
        return config
    if backend == "kubernetes":
        from airflow_tfk.backends.kubernetes import KubernetesBackend as cls
    else:
        from airflow_tfk.backends.local import LocalBackend as cls  # type: ignore[assignment]
    allowed = set(inspect.signature(cls).parameters)
    unknown = sorted(str(k) for k in set(config) - allowed)
    if unknown:
        raise SpecError(
            f"backend_config.{unknown[0]}",
            f"unknown option of the {backend} backend (allowed: {', '.join(sorted(allowed))})",
        )
    return config


def _with_namespace(options: object, where: str) -> dict[str, Any]:
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise SpecError(where, "must be a mapping", options)
    return {"namespace": defaults.NAMESPACE, **options}


def _claim_of(cluster: Mapping[str, Any], volume: str) -> str | None:
    storage = cluster.get("storage")
    if isinstance(storage, Mapping) and isinstance(storage.get(volume), Mapping):
        claim = storage[volume].get("claim")
        return claim if isinstance(claim, str) else None
    return None


TOP_LEVEL = (
    "dag_id",
    "description",
    "schedule",
    "start_date",
    "catchup",
    "max_active_runs",
    "previous_run_policy",
    "max_duration_minutes",
    "retries",
    "retry_delay_seconds",
    "owners",
    "tags",
    "backend",
    "kubernetes_conn_id",
    "backend_config",
    "deferrable",
    "progress_interval",
    "stall_seconds",
    "cleanup",
    "params",
    "cluster",
    "publish",
    "tensorboard",
    "sweep",
)

#: the blocks that reach the operators' templated fields: rendered on the worker
TEMPLATED = ("cluster", "backend_config", "publish", "tensorboard")


def _run_options(data: Mapping[str, Any]) -> tuple[str, str, str, float]:
    """previous_run_policy, backend, cleanup and progress_interval, checked."""
    policy = data.get("previous_run_policy", PreviousRunPolicy.ALLOW.value)
    if policy not in {p.value for p in PreviousRunPolicy}:
        raise SpecError(
            "previous_run_policy", f"must be one of {', '.join(p.value for p in PreviousRunPolicy)}", policy
        )
    backend = data.get("backend", defaults.BACKEND)
    if backend not in BACKENDS:
        raise SpecError("backend", f"must be one of {', '.join(BACKENDS)}", backend)
    cleanup = data.get("cleanup", CLEANUP.value)
    if cleanup not in {c.value for c in Cleanup}:
        raise SpecError("cleanup", "must be ps or all", cleanup)
    progress = data.get("progress_interval", PROGRESS_INTERVAL_SECONDS)
    if isinstance(progress, bool) or not isinstance(progress, (int, float)) or not 1 <= progress <= 3600:
        raise SpecError("progress_interval", "must be a number of seconds between 1 and 3600", progress)
    return policy, backend, cleanup, float(progress)


def parse_training(data: Mapping[str, Any], *, default_dag_id: str, source: str) -> TrainingFile:
    """Validate a training file's mapping. Raises :class:`SpecError` naming the field
    (``cluster.worker.replicas``, ``publish.serving.replicas``, ``params.steps.minimun``...)."""
    from airflow_tfk.dagfactory.sandbox import check_templates
    from airflow_tfk.operators.serving import PublishModelOperator
    from airflow_tfk.operators.tensorboard import TensorBoardOperator

    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        raise SpecError(unknown[0], f"unknown key (allowed: {', '.join(TOP_LEVEL)})")
    for block in TEMPLATED:
        check_templates(data.get(block), block)
    dag_id = _str(data, "dag_id", default_dag_id, 250)
    assert dag_id is not None
    if not _DAG_ID.fullmatch(dag_id):
        raise SpecError("dag_id", "must be letters, digits, '_', '.' and '-' (at most 250)", dag_id)
    policy, backend, cleanup, progress = _run_options(data)
    max_minutes = _int(data, "max_duration_minutes", None, 1, 366 * 24 * 60)
    params = _params(data.get("params"))

    cluster = _mapping(data, "cluster")
    if cluster is None:
        raise SpecError("cluster", "is required: the TFClusterSpec of the training")
    cluster = _cluster(cluster, params, max_minutes, dag_id)
    for block in ("publish", "tensorboard", "backend_config", "sweep"):
        for where, name in param_refs(data.get(block), block):
            if name not in params:
                raise SpecError(where, f"refers to params.{name}, which is not declared under params")
    publish = _operator_options(
        data.get("publish"),
        "publish",
        PublishModelOperator,
        true_means={"claim": _claim_of(cluster, "models")} if _claim_of(cluster, "models") else {},
    )
    if publish is not None and "model_name" not in publish:
        raise SpecError("publish.model_name", "is required: the model's name in TF Serving")
    tensorboard = _operator_options(
        data.get("tensorboard"),
        "tensorboard",
        TensorBoardOperator,
        true_means={"claim": _claim_of(cluster, "logs")} if _claim_of(cluster, "logs") else {},
    )
    if tensorboard is not None and not (tensorboard.get("claim") or tensorboard.get("base_path")):
        raise SpecError("tensorboard.claim", "is required (or give cluster.storage.logs.claim, or base_path)")
    # Like the example DAGs, a file that names no namespace uses the deployment's ($TFK_NAMESPACE).
    if publish is not None:
        publish["serving"] = _with_namespace(publish.get("serving"), "publish.serving")
    if tensorboard is not None:
        tensorboard["tensorboard"] = _with_namespace(
            tensorboard.get("tensorboard"), "tensorboard.tensorboard"
        )
    return TrainingFile(
        dag_id=dag_id,
        source=source,
        cluster=cluster,
        description=_str(data, "description", None, multiline=True),
        schedule=_schedule(data.get("schedule")),
        start_date=_start_date(data.get("start_date")),
        catchup=_bool(data, "catchup", False),
        max_active_runs=_int(data, "max_active_runs", 1 if policy == "allow" else 2, 1, 100) or 1,
        previous_run_policy=policy,
        max_duration_minutes=max_minutes,
        retries=_int(data, "retries", 0, 0, 100) or 0,
        retry_delay_seconds=_int(data, "retry_delay_seconds", 300, 0, 24 * 3600) or 0,
        owners=_str_list(data, "owners", ("airflow",)),
        tags=_str_list(data, "tags", ()),
        backend=backend,
        kubernetes_conn_id=_str(data, "kubernetes_conn_id", defaults.KUBERNETES_CONN_ID, 250)
        or defaults.KUBERNETES_CONN_ID,
        backend_config=_backend_config(data, backend),
        deferrable=_bool(data, "deferrable", defaults.DEFERRABLE),
        progress_interval=progress,
        stall_seconds=check_stall_seconds(data.get("stall_seconds", STALL_SECONDS)),
        cleanup=cleanup,
        params=params,
        publish=publish,
        tensorboard=tensorboard,
        sweep=_sweep(data.get("sweep"), params),
    )


def _sweep(value: object, params: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The sweep block, checked by SweepConfig itself (its errors name ``sweep.<field>``)."""
    if value is None:
        return None
    from airflow_tfk.sweep.config import SweepConfig

    if not isinstance(value, Mapping):
        raise SpecError("sweep", "must be a mapping of the sweep's settings", value)
    SweepConfig.from_dict(with_param_defaults(dict(value), params))
    return dict(value)


def _cluster(
    cluster: dict[str, Any], params: Mapping[str, Mapping[str, Any]], max_minutes: int | None, dag_id: str
) -> dict[str, Any]:
    """The cluster block, checked by TFClusterSpec itself (errors prefixed ``cluster.``)."""
    from airflow_tfk.naming import cluster_name_for
    from airflow_tfk.spec import TFClusterSpec

    for where, name in param_refs(cluster, "cluster"):
        if name not in params:
            raise SpecError(where, f"refers to params.{name}, which is not declared under params")
    if max_minutes is not None:
        limit = max_minutes * 60
        given = cluster.get("max_duration_seconds")
        if given is None:
            cluster["max_duration_seconds"] = limit
        elif isinstance(given, int) and not isinstance(given, bool) and given > limit:
            raise SpecError(
                "cluster.max_duration_seconds",
                f"must not exceed max_duration_minutes ({max_minutes} min = {limit} s)",
                given,
            )
    cluster.setdefault("namespace", defaults.NAMESPACE)
    probe = with_param_defaults(cluster, params)
    if not probe.get("name"):
        # The name the train task will derive (same length for every run), so the
        # generated-name length checks are the real ones.
        probe["name"] = cluster_name_for(dag_id, TRAIN_TASK, "scheduled__2026-01-01T00:00:00+00:00")
    try:
        TFClusterSpec.from_dict(probe)
    except SpecError as exc:
        raise SpecError(f"cluster.{exc.field}", exc.rule, exc.value) from None
    return cluster
