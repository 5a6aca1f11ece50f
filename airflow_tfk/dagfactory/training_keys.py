"""The training file's own keys, each declared once: type, default, bounds or choices and
help. The checks in :func:`~airflow_tfk.dagfactory.training.parse_training` and the JSON
Schema's entries for these keys (:func:`~airflow_tfk.dagfactory.spec_docs.training_schema`) both come
from :data:`KEYS`.

This is a small sibling of :mod:`airflow_tfk.spec.decl` rather than a use of it: the keys
are not one dataclass (several defaults depend on the deployment's environment or on other
keys), and their messages ("must be an integer between 1 and 100") are the ones users
already see. Blocks with their own logic (``schedule``, ``params``, ``cluster``,
``publish``, ``tensorboard``, ``backend_config``, ``sweep``) are declared here for their
type and help; their checks stay with the code that owns them.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from airflow_tfk.core.constants import (
    BACKEND,
    BACKEND_KINDS,
    CLEANUP,
    KUBERNETES_CONN_ID,
    PROGRESS_INTERVAL_SECONDS,
    STALL_PROGRESS_INTERVALS,
    STALL_SECONDS_FLOOR,
    Cleanup,
)
from airflow_tfk.core.errors import SpecError, unknown_key
from airflow_tfk.core.printable import control_character
from airflow_tfk.spec.run_policy import PreviousRunPolicy

__all__ = ["DEFAULT_START", "KEYS", "PRESETS", "Key", "key_schema"]

PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
DEFAULT_START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

#: ``block``: checked by its owner (declared for its type and help only)
KINDS = ("int", "number", "bool", "str", "text", "enum", "str_list", "custom", "block")


class Key(NamedTuple):
    """One top-level key of a training file (a named tuple: the class is built when a DAG
    file that loads training files is parsed, and a frozen dataclass of these eleven
    fields costs several times as much to build).

    :param kind: one of :data:`KINDS` (``text``: a string that may span lines).
    :param default: the value when the key is absent or null (the schema's default).
    :param lo: lowest value of a number.
    :param hi: highest value of a number, or longest string.
    :param choices: the values an ``enum`` takes.
    :param pattern: a regular expression a string must match whole; ``rule`` says it in words.
    :param rule: the error's rule where the kind's own wording is not the clearest.
    :param check: a ``custom`` key's check: ``check(value) -> value`` (null included; the
        default when absent).
    :param schema: the JSON Schema of a ``custom`` or ``block`` key.
    """

    name: str
    help: str
    kind: str
    default: Any = None
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    rule: str = ""
    check: Callable[[Any], Any] | None = None
    schema: Mapping[str, Any] | None = None

    def parse(self, data: Mapping[str, Any], default: Any = None) -> Any:
        """The key's value in ``data``, checked; ``default`` (else the declared one) when
        absent or null. Raises :class:`SpecError` naming the key."""
        if self.kind == "custom":
            assert self.check is not None
            return self.check(data.get(self.name, self.default))
        value = data.get(self.name)
        if value is None:
            return self.default if default is None else default
        return _CHECKS[self.kind](self, value)


def _int(key: Key, value: Any) -> int:
    assert key.lo is not None and key.hi is not None
    if isinstance(value, bool) or not isinstance(value, int) or not key.lo <= value <= key.hi:
        raise SpecError(key.name, f"must be an integer between {key.lo:g} and {key.hi:g}", value)
    return value


def _number(key: Key, value: Any) -> float:
    assert key.lo is not None and key.hi is not None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not key.lo <= value <= key.hi:
        raise SpecError(key.name, key.rule or f"must be a number between {key.lo:g} and {key.hi:g}", value)
    return float(value)


def _bool(key: Key, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(key.name, "must be true or false", value)
    return value


def _str(key: Key, value: Any) -> str:
    hi = int(key.hi or 4096)
    if not isinstance(value, str) or not value.strip() or len(value) > hi:
        raise SpecError(key.name, f"must be a non-empty string of at most {hi} characters", value)
    bad = control_character(value, multiline=key.kind == "text")
    if bad is not None:
        raise SpecError(key.name, f"must not contain the control character {bad!r}", value)
    if key.pattern is not None and not re.fullmatch(key.pattern, value):
        raise SpecError(key.name, key.rule or f"must match {key.pattern}", value)
    return value


def _enum(key: Key, value: Any) -> str:
    if value not in key.choices:
        raise SpecError(key.name, key.rule or f"must be one of {', '.join(key.choices)}", value)
    return str(value)


def _str_list(key: Key, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise SpecError(key.name, "must be a list of strings", value)
    for i, item in enumerate(value):
        if not isinstance(item, str) or not 1 <= len(item) <= 100 or control_character(item) is not None:
            raise SpecError(f"{key.name}[{i}]", "must be a non-empty string of at most 100 characters", item)
    return tuple(value)


_CHECKS: dict[str, Callable[[Key, Any], Any]] = {
    "int": _int,
    "number": _number,
    "bool": _bool,
    "str": _str,
    "text": _str,
    "enum": _enum,
    "str_list": _str_list,
}


def key_schema(key: Key) -> dict[str, Any]:
    """The key's JSON Schema: its type, bounds, choices, default and description."""
    kind = key.kind
    out: dict[str, Any]
    if kind in ("int", "number"):
        out = {"type": "integer" if kind == "int" else "number", "minimum": key.lo, "maximum": key.hi}
        out = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in out.items()}
    elif kind == "bool":
        out = {"type": "boolean"}
    elif kind in ("str", "text"):
        out = {"type": "string", "minLength": 1, "maxLength": int(key.hi or 4096)}
        if key.pattern is not None:
            out["pattern"] = f"^(?:{key.pattern})$"
    elif kind == "enum":
        out = {"enum": list(key.choices)}
    elif kind == "str_list":
        item = {"type": "string", "minLength": 1, "maxLength": 100}
        out = {"anyOf": [item, {"type": "array", "items": item}]}
    else:
        out = dict(key.schema or {})
    # Null means "the default" for every key, as the checks read it.
    if kind in ("custom", "block"):
        pass
    elif "type" in out:
        out["type"] = [out["type"], "null"]
    elif "enum" in out:
        out["enum"] = [*out["enum"], None]
    else:
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    out["description"] = key.help
    if key.default is not None and kind not in ("custom", "block"):
        out["default"] = list(key.default) if isinstance(key.default, tuple) else key.default
    return out


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
    if isinstance(value, (list, Mapping)):  # assets (only then is their module loaded)
        from airflow_tfk.dagfactory.asset_schedule import parse_asset_schedule

        return parse_asset_schedule(value)
    if not isinstance(value, str) or not value.strip():
        raise SpecError("schedule", "must be a cron expression, a preset such as @daily, or null", value)
    value = value.strip()
    if value.startswith("@") and value not in PRESETS:
        raise SpecError("schedule", unknown_key(value, PRESETS, "unknown preset"), value)
    # Cron syntax is checked by Airflow's own timetable when the DAG is built.
    return value


def _stall_seconds(value: object) -> float | None:
    from airflow_tfk.spec.operator_options import check_stall_seconds

    # absent: None, so the operator's default follows the file's progress_interval
    return None if value is None else check_stall_seconds(value)


_OBJECT = {"type": ["object", "null"]}

#: the training file's own keys, in the order the docs list them
KEYS: tuple[Key, ...] = (
    Key(
        "dag_id",
        "the DAG's id (default: the file name without .yaml)",
        "str",
        hi=250,
        pattern=r"[\w.-]{1,250}",  # Airflow's dag_id alphabet (KEY_REGEX)
        rule="must be letters, digits, '_', '.' and '-' (at most 250)",
    ),
    Key("description", "the DAG's description", "text"),
    Key(
        "schedule",
        "a cron expression, a preset (@daily, @hourly, @once...), or null: manual only",
        "custom",
        check=_schedule,
        schema={"type": ["string", "object", "array", "null"]},
    ),
    Key(
        "start_date",
        "the first date the schedule counts from (default 2026-01-01)",
        "custom",
        check=_start_date,
        schema={"type": ["string", "null"], "default": "2026-01-01"},
    ),
    Key("catchup", "run the missed intervals since start_date", "bool", default=False),
    Key(
        "max_active_runs",
        "runs of this DAG at once (2 unless previous_run_policy is allow)",
        "int",
        1,
        1,
        100,
    ),
    Key(
        "previous_run_policy",
        "allow | kill_previous | skip | wait",
        "enum",
        PreviousRunPolicy.ALLOW.value,
        choices=tuple(p.value for p in PreviousRunPolicy),
    ),
    Key(
        "max_duration_minutes",
        "execution_timeout, and the cluster's max_duration_seconds",
        "int",
        None,
        1,
        366 * 24 * 60,
    ),
    Key("retries", "retries of the train task", "int", 0, 0, 100),
    Key("retry_delay_seconds", "wait between retries", "int", 300, 0, 24 * 3600),
    Key("owners", "the DAG's owners", "str_list", ("airflow",)),
    Key("tags", "the DAG's tags", "str_list", ()),
    Key("backend", "kubernetes | local (default: $TFK_BACKEND)", "enum", BACKEND, choices=BACKEND_KINDS),
    Key("kubernetes_conn_id", "the Kubernetes connection", "str", KUBERNETES_CONN_ID, hi=250),
    Key("backend_config", "options of the chosen backend", "block", schema=_OBJECT),
    Key("deferrable", "wait in the triggerer (default: Airflow's [operators] default_deferrable)", "bool"),
    Key(
        "progress_interval",
        "seconds between progress lines",
        "number",
        PROGRESS_INTERVAL_SECONDS,
        1,
        3600,
        rule="must be a number of seconds between 1 and 3600",
    ),
    Key(
        "stall_seconds",
        "a training whose step does not move for this long is reported as stalled (default: "
        f"{STALL_PROGRESS_INTERVALS} progress intervals, at least {STALL_SECONDS_FLOOR:.0f} s; 0: off)",
        "custom",
        None,
        check=_stall_seconds,
        schema={"type": ["number", "null"], "minimum": 0, "maximum": 7 * 24 * 3600},
    ),
    Key(
        "cleanup",
        "ps | all: what is deleted after success",
        "enum",
        CLEANUP.value,
        choices=tuple(c.value for c in Cleanup),
        rule="must be ps or all",
    ),
    Key("params", 'the "Trigger DAG" form; refer to them as {{ params.NAME }}', "block", schema=_OBJECT),
    Key("cluster", "a TFClusterSpec (airflow-tfk render's format); name optional", "block"),
    Key("publish", "the TFPublishModelOperator's options", "block", schema=_OBJECT),
    Key(
        "tensorboard",
        "true, or the TFStartTensorBoardOperator's options",
        "block",
        schema={"type": ["boolean", "object", "null"]},
    ),
    Key(
        "sweep",
        "a hyperparameter sweep instead of one training (TFHyperparameterSweepOperator's settings)",
        "block",
        schema=_OBJECT,
    ),
)
