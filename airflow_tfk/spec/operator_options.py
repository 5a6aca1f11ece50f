"""Checks of the arguments the operators, the sensor and the trigger take, each raising a
:class:`~airflow_tfk.core.errors.SpecError` that names the argument (and the path inside it).

An operator checks its arguments in ``__init__``, so a bad DAG fails to parse instead of
failing a run; a templated argument (a ``template_fields`` entry holding a Jinja string at
parse time) is checked again after rendering, in ``execute``, before anything is created.
Pure and cheap: no Airflow, no Kubernetes client (DAG files construct operators at parse
time).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
from collections.abc import Mapping

from airflow_tfk.core import naming
from airflow_tfk.core.constants import (
    PROGRESS_INTERVAL_SECONDS,
    STALL_PROGRESS_INTERVALS,
    STALL_SECONDS_FLOOR,
)
from airflow_tfk.core.errors import SpecError

__all__ = [
    "BACKEND_OPTIONS",
    "BACKEND_OPTION_RULES",
    "backend_config_arg",
    "backend_option",
    "backend_options",
    "bool_arg",
    "check_stall_seconds",
    "default_stall_seconds",
    "cluster_arg",
    "cluster_spec_arg",
    "holds_jinja",
    "mapping_arg",
    "name_prefix_arg",
    "names_arg",
    "namespace_arg",
    "number_arg",
    "plain",
    "str_arg",
    "str_map_of_ints",
    "templated",
    "waiting_args",
]

#: The options each backend's constructor takes (``backend_config``). A test holds this
#: table equal to the constructors' signatures; it is written out so that checking an
#: operator's arguments at DAG parse time imports neither backend.
BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "local": (
        "root",
        "fixed_ports",
        "workdir",
        "kill_grace_seconds",
        "restart_backoff_seconds",
        "poll_interval",
        "inherit_env",
        "env_allowlist",
        "loopback_only",
        "keep_history",
        "start_timeout_seconds",
        "max_tasks",
    ),
    "kubernetes": (
        "conn_id",
        "cluster_context",
        "config_file",
        "in_cluster",
        "unschedulable_timeout",
        "image_pull_timeout",
        "field_manager",
    ),
}

#: What each backend option holds, checked wherever ``backend_config`` is given (an
#: operator at parse time, once rendered) and by the backends' constructors: a timeout,
#: an interval, a grace or a history of zero or less, or a bare string where a list of
#: names belongs (``'PATH'`` read as four names), is refused naming the option.
#: (kind, low, high): "seconds" and "count" are bounded numbers (low exclusive for
#: seconds: zero waits nothing and polls without pause), "names" a list of names.
BACKEND_OPTION_RULES: dict[str, dict[str, tuple[str, float, float]]] = {
    "local": {
        "root": ("path", 0, 0),
        "fixed_ports": ("bool", 0, 0),
        "workdir": ("path", 0, 0),
        "kill_grace_seconds": ("seconds", 0, 86400),
        "restart_backoff_seconds": ("seconds", 0, 3600),
        "poll_interval": ("seconds", 0, 3600),
        "inherit_env": ("bool", 0, 0),
        "env_allowlist": ("names", 0, 0),
        "loopback_only": ("bool", 0, 0),
        "keep_history": ("count", 1, 10_000),
        "start_timeout_seconds": ("seconds", 0, 86400),
        "max_tasks": ("count", 1, 1_000_000),
    },
    "kubernetes": {
        "conn_id": ("str", 0, 0),
        "cluster_context": ("str", 0, 0),
        "config_file": ("path", 0, 0),
        "in_cluster": ("bool", 0, 0),
        "unschedulable_timeout": ("seconds", 0, 7 * 86400),
        "image_pull_timeout": ("seconds", 0, 7 * 86400),
        "field_manager": ("str", 0, 0),
    },
}


def names_arg(value: object, field: str, *, optional: bool = True) -> None:
    """A list of names (strings): a bare string is refused, not read as its characters."""
    if value is None and optional:
        return
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise SpecError(field, "must be a list of names, not a single string", value)
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name or len(name) > 1024:
            raise SpecError(f"{field}[{i}]", "must be a non-empty name", name)


def backend_option(kind: str, name: str, value: object, field: str = "backend_config") -> None:
    """``value`` for the option ``name`` of the ``kind`` backend, by
    :data:`BACKEND_OPTION_RULES`; None is the option's default."""
    rule = BACKEND_OPTION_RULES.get(kind, {}).get(name)
    if rule is None or value is None or holds_jinja(value) or templated(value):
        return
    what, lo, hi = rule
    where = f"{field}.{name}"
    if what == "seconds":
        number_arg(value, where, lo=lo, hi=hi)
        if value == lo:
            raise SpecError(where, f"must be more than {lo:g} seconds", value)
    elif what == "count":
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise SpecError(where, f"must be an integer from {lo:g} to {hi:g}", value)
    elif what == "bool":
        bool_arg(value, where)
    elif what == "names":
        names_arg(value, where)
    else:
        str_arg(value, where)
        if what == "path" and "\0" in str(value):
            raise SpecError(where, "must be a path without NUL", value)


def backend_options(kind: str, options: Mapping[str, object], field: str = "backend_config") -> None:
    """Every option of ``options`` by :func:`backend_option` (unknown names are
    :func:`backend_config_arg`'s)."""
    for name, value in options.items():
        backend_option(kind, name, value, field)


# Far above any real argument; what a hostile one (a million-item list, a 10,000-deep
# nesting) is refused at, before the spec classes look at it item by item.
MAX_NODES = 200_000
MAX_DEPTH = 64
_INT64 = 2**63


def templated(value: object) -> bool:
    """A value Airflow resolves before ``execute``: a Jinja string, or an XComArg (any of
    Airflow's resolvable references, duck-typed: this module does not import Airflow)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    return callable(getattr(value, "resolve", None)) and callable(getattr(value, "iter_references", None))


def holds_jinja(value: object) -> bool:
    """A string anywhere in ``value`` (through mappings, lists and tuples) carries Jinja, so
    what it says is known only after rendering: a parse-time check must leave it be."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, Mapping):
        return any(holds_jinja(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_jinja(v) for v in value)
    return False


def plain(value: object, field: str) -> None:
    """``value`` is data an argument can hold: mappings with string keys, lists, strings,
    booleans, None, 64-bit integers and finite floats (what JSON, XCom and the API server
    carry), within a size and depth bound. Objects of this package's own types (a spec, a
    peer, an enum) pass as they are: their classes validate them."""
    nodes = 0
    stack: list[tuple[object, str, int]] = [(value, field, 0)]
    while stack:
        item, where, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise SpecError(field, f"is too large (over {MAX_NODES} values)")
        if depth > MAX_DEPTH:
            raise SpecError(where, f"is nested too deeply (over {MAX_DEPTH} levels)")
        if isinstance(item, (Mapping, list, tuple)) and len(item) > MAX_NODES - nodes:
            raise SpecError(where, f"is too large (over {MAX_NODES} values)")
        if isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    raise SpecError(where, "keys must be strings", key)
            stack.extend((v, f"{where}.{k}", depth + 1) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
        else:
            _scalar(item, where)


def _scalar(item: object, where: str) -> None:
    if item is None or isinstance(item, (str, bool, enum.Enum)) or dataclasses.is_dataclass(item):
        return
    if templated(item):
        return  # an XComArg: checked again once resolved
    if isinstance(item, int):
        if not -_INT64 <= item < _INT64:
            raise SpecError(where, "is out of range (a 64-bit integer)", item)
    elif isinstance(item, float):
        if not math.isfinite(item):
            raise SpecError(where, "must be a finite number", item)
    else:
        raise SpecError(
            where, "must be plain data: a mapping, list, string, number, boolean or null", type(item).__name__
        )


def mapping_arg(value: object, field: str, *, optional: bool = True) -> None:
    """A mapping argument (or None when ``optional``; a Jinja string until rendered)."""
    if (value is None and optional) or templated(value):
        return
    if not isinstance(value, Mapping):
        raise SpecError(field, "must be a mapping", value)
    plain(value, field)


def cluster_spec_arg(value: object, field: str = "cluster_spec") -> None:
    """A ``TFClusterSpec``, a mapping of its fields, or YAML text.

    The spec classes are not imported for the ``isinstance`` test: a ``TFClusterSpec``
    can only exist once its module is loaded, and a DAG that passes a mapping (most do)
    then parses without the spec's declarations, which only ``execute`` needs.
    """
    spec_module = sys.modules.get("airflow_tfk.spec.cluster")
    if isinstance(value, str) or templated(value):
        return
    if spec_module is not None and isinstance(value, spec_module.TFClusterSpec):
        return
    if not isinstance(value, Mapping):
        raise SpecError(field, "must be a TFClusterSpec, a mapping of its fields or YAML text", value)
    plain(value, field)


def cluster_arg(value: object, field: str = "cluster") -> None:
    """A create task's XCom (a mapping), or a Jinja string that renders to it."""
    mapping_arg(value, field, optional=False)


def backend_config_arg(value: object, backend: object, field: str = "backend_config") -> None:
    """The options of ``backend``: a mapping of the names its constructor takes."""
    mapping_arg(value, field)
    if not isinstance(value, Mapping):
        return
    allowed = BACKEND_OPTIONS.get(backend) if isinstance(backend, str) else None
    if allowed is None:
        return  # a templated backend: checked again once rendered
    unknown = sorted(k for k in value if k not in allowed)
    if unknown:
        raise SpecError(
            f"{field}.{unknown[0]}",
            f"is not an option of the {backend} backend (options: {', '.join(allowed)})",
        )
    backend_options(str(backend), value, field)


def number_arg(value: object, field: str, *, lo: float, hi: float, optional: bool = False) -> None:
    """A finite number in ``[lo, hi]`` (not a boolean)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field, "must be a number", value)
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise SpecError(field, f"must be between {lo:g} and {hi:g}", value)
    if not math.isfinite(value) or not lo <= value <= hi:
        raise SpecError(field, f"must be between {lo:g} and {hi:g}", value)


def bool_arg(value: object, field: str) -> None:
    if not isinstance(value, bool) and not templated(value):
        raise SpecError(field, "must be true or false", value)


#: what a deadline forecast may do besides its line and callback (run.forecast)
DEADLINE_ACTIONS = ("warn", "checkpoint_and_stop")


def deadline_action_arg(value: object) -> None:
    if value not in DEADLINE_ACTIONS:
        raise SpecError("deadline_action", f"must be one of {', '.join(DEADLINE_ACTIONS)}", value)


_FORECAST_KEYS: dict[str, tuple[dict[str, float], tuple[str, ...]]] = {
    "deadline": ({"deadline": 2**40}, ("what",)),
    "budget": ({"cap": 1e15, "rate": 1e15, "since": 2**40}, ("unit",)),
}


def forecast_arg(value: object) -> None:
    """A trigger's forecast state (``DeadlineForecast.to_dict()``, ``BudgetForecast.to_dict()``)."""
    kind = value.get("kind") if isinstance(value, Mapping) else None
    if kind not in _FORECAST_KEYS:
        raise SpecError("forecasts", "must be forecast states of kind deadline or budget", value)
    assert isinstance(value, Mapping)
    numbers, texts = _FORECAST_KEYS[kind]
    keys = {"kind", "action", "alerted", "hand_over", *numbers, *texts}
    if set(value) != keys:
        raise SpecError(
            "forecasts", f"a {kind} forecast must be a mapping of {', '.join(sorted(keys))}", value
        )
    for key, hi in numbers.items():
        number_arg(value[key], f"forecasts.{key}", lo=0, hi=hi)
    for key in texts:
        str_arg(value[key], f"forecasts.{key}", max_len=200)
    deadline_action_arg(value["action"])
    for key in ("alerted", "hand_over"):
        if not isinstance(value[key], bool):
            raise SpecError(f"forecasts.{key}", "must be true or false", value[key])


def str_arg(value: object, field: str, *, optional: bool = False, max_len: int = 4096) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise SpecError(field, "must be a string", value)
    if len(value) > max_len:
        raise SpecError(field, f"must be at most {max_len} characters", value)


def namespace_arg(value: object, field: str = "namespace", *, optional: bool = True) -> None:
    """A namespace name (DNS-1123 label), None when ``optional``, or a Jinja string."""
    if (value is None and optional) or templated(value):
        return
    if not isinstance(value, str) or not naming.is_dns1123_label(value):
        raise SpecError(field, "must be a namespace name (DNS-1123 label)", value)


def str_map_of_ints(value: object, field: str) -> None:
    """A mapping of names to non-negative integers (a handle's replicas)."""
    if not isinstance(value, Mapping):
        raise SpecError(field, "must be a mapping", value)
    for key, count in value.items():
        if not isinstance(key, str):
            raise SpecError(field, "keys must be strings", key)
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count < _INT64:
            raise SpecError(f"{field}.{key}", "must be a non-negative integer", count)


def waiting_args(deferrable: object, progress_interval: object) -> None:
    """The arguments of a wait (the training operator, the sensor): how, and how often
    it reports progress."""
    if not isinstance(deferrable, bool):
        raise SpecError("deferrable", "must be true or false", deferrable)
    number_arg(progress_interval, "progress_interval", lo=0.1, hi=86400)


def name_prefix_arg(value: object) -> None:
    """The prefix of derived cluster names: a DNS-1035 label that leaves room for the
    hash and the role suffixes."""
    if not isinstance(value, str) or not naming.is_dns1035_label(value) or len(value) > 20:
        raise SpecError("name_prefix", "must be a DNS-1035 label of at most 20 characters", value)


#: the longest ``stall_seconds`` (:mod:`airflow_tfk.run.stall`): a week
STALL_SECONDS_MAX = 7 * 24 * 3600.0


def default_stall_seconds(progress_interval: object = PROGRESS_INTERVAL_SECONDS) -> float:
    """``stall_seconds`` when none is given: :data:`STALL_PROGRESS_INTERVALS` progress
    intervals, at least :data:`STALL_SECONDS_FLOOR` (5 minutes at the default interval)."""
    interval = (
        float(progress_interval)
        if isinstance(progress_interval, (int, float)) and not isinstance(progress_interval, bool)
        else PROGRESS_INTERVAL_SECONDS
    )
    if not math.isfinite(interval) or interval <= 0:
        interval = PROGRESS_INTERVAL_SECONDS
    return min(STALL_SECONDS_MAX, max(STALL_SECONDS_FLOOR, STALL_PROGRESS_INTERVALS * interval))


def check_stall_seconds(
    value: object, field: str = "stall_seconds", *, progress_interval: object = PROGRESS_INTERVAL_SECONDS
) -> float:
    """``stall_seconds`` as given to an operator or in a training file: None (the default,
    which follows ``progress_interval``: :func:`default_stall_seconds`), 0 (off), or a
    number of seconds from 1 to a week. Raises :class:`~airflow_tfk.core.errors.SpecError`."""
    if value is None:
        return default_stall_seconds(progress_interval)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int past float's range
            seconds = math.inf
        if math.isfinite(seconds) and (seconds == 0 or 1 <= seconds <= STALL_SECONDS_MAX):
            return seconds
    raise SpecError(field, f"must be 0 (off) or a number of seconds from 1 to {STALL_SECONDS_MAX:.0f}", value)
