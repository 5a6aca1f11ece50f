"""The ``params`` block of a training file (the "Trigger DAG" form) and the ``params.NAME``
references in the other blocks: checked, and resolved to their defaults so the cluster can
be validated at parse time without rendering a template."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_tfk.core.errors import SpecError, unknown_key

__all__ = ["PARAM_KEYS", "param_refs", "parse_params", "with_param_defaults"]

_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_PARAM_REF = re.compile(r"\bparams\.([A-Za-z_][A-Za-z0-9_]*)")
_WHOLE_PARAM = re.compile(r"^\{\{\s*params\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
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


def parse_params(value: object) -> dict[str, dict[str, Any]]:
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
                raise SpecError(f"{where}.{unknown[0]}", unknown_key(unknown[0], sorted(PARAM_KEYS)))
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
