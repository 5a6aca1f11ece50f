"""The spec's fields, each declared once, and the validation generated from them.

A spec field is one dataclass field whose metadata is a :class:`Decl` (made by
:func:`spec_field`): its type (``kind``), default, bounds, choices, help text, per-role
bounds and its entry in the UI form. From that one declaration come:

- the validation (:func:`check_fields`): type, bounds, choices and the field's own rule,
  run for every field independently so one pass reports every error with its path;
- the README's field table, the UI form's Params and the training files' JSON Schema
  (:mod:`airflow_tfk.dagfactory.spec_docs`).

Rules that join several fields (``parameter_server`` needs a chief, ``metrics_port``
differs from ``port``) stay in the classes as small methods run through
:meth:`Errors.run`, which skips a rule when a field it reads is already wrong.

Why not pydantic v2 (installed with Airflow): its strict mode would check types and bounds
in fewer lines, but its messages ("Input should be less than or equal to 10000",
``worker.replicas`` as ``('worker', 'replicas')``) are not the ones the README, the
troubleshooting table and users' tests rely on, so every rule would need a custom message
anyway; the lax mode that gives short code turns ``"8"`` into 8, which a spec must refuse.
Most rules here are Kubernetes name and quantity rules and cross-field rules that pydantic
cannot express declaratively. The hand-written kinds below are about 150 lines and keep
the messages; pydantic would add a model layer beside the frozen dataclasses the rest of the
package uses.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from airflow_tfk.core.errors import SpecError, SpecErrors
from airflow_tfk.spec.checks import _bounded, _reject_unknown, _str_list, _str_map

_T = TypeVar("_T")

__all__ = [
    "Decl",
    "Errors",
    "Form",
    "check_fields",
    "declared",
    "spec_field",
    "from_mapping",
    "section_from",
    "section_field",
    "choice_field",
]

KINDS = (
    "int",
    "number",
    "bool",
    "str",
    "enum",
    "str_list",
    "int_list",
    "str_map",
    "section",
    "sections",
    "custom",
)


class Form(NamedTuple):
    """How a field appears in the UI's "Trigger DAG" form: the Param's name and title,
    and what differs from the field's own bounds (``minimum=0`` where 0 means "none")."""

    name: str
    title: str
    description: str = ""
    default: Any = None
    minimum: int | None = None


class Decl(NamedTuple):
    """One field's declaration.

    A named tuple, not a frozen dataclass like the spec's sections: every spec module
    builds these records when it is imported (DAG parse time), and a named tuple class
    costs about a tenth of a dataclass of sixteen fields to create.

    :param help: what the field means, as the README's table says it.
    :param kind: one of :data:`KINDS`.
    :param lo: lowest integer (or the fewest characters of a string).
    :param hi: highest integer, longest string, or most items of a list or mapping.
    :param choices: the Enum whose values the field takes.
    :param pattern: a regular expression the string must match (checked, and in the schema).
    :param rule: the rule that ``pattern`` states, in words, for the error.
    :param check: the field's own rule after its kind: ``check(value, path) -> value``.
    :param section: the nested dataclass of a ``section``, ``sections`` or ``custom`` field.
    :param prefix: the README's path of the section's fields (``<role>.``); default the path.
    :param roles: per-role bounds of a role's field, by role name.
    :param keys: key rule of a ``str_map``: ``env`` or ``label``.
    :param form: its entry in the UI form (a :class:`Form`, or one per role).
    :param default_text: the README's default where the value is not the whole story.
    :param schema: the JSON Schema of a ``custom`` field (or what to add to the generated one).
    :param required: must be given (no default).
    """

    help: str
    kind: str
    lo: int | None = None
    hi: int | None = None
    choices: type[enum.Enum] | None = None
    pattern: str | None = None
    rule: str = ""
    check: Callable[[Any, str], Any] | None = None
    section: type | None = None
    prefix: str | None = None
    roles: Mapping[str, tuple[int, int]] | None = None
    keys: str = "env"
    form: Form | Mapping[str, Form] | None = None
    default_text: str | None = None
    schema: Mapping[str, Any] | None = None
    required: bool = False

    def bounds(self, role: str | None) -> tuple[int | None, int | None]:
        if self.roles and role is not None and role in self.roles:
            return self.roles[role]
        return self.lo, self.hi


def spec_field(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, **decl: Any) -> Any:
    """A dataclass field declared for the spec (see :class:`Decl` for ``decl``)."""
    meta = {"tfk": Decl(required=default is dataclasses.MISSING and factory is dataclasses.MISSING, **decl)}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def str_map_field(keys: str, help: str, **decl: Any) -> Any:
    """A mapping of strings to strings, empty when left out; ``keys`` names the rule its keys
    follow (``env``: environment variable names, ``label``: label keys)."""
    return spec_field(factory=dict, kind="str_map", keys=keys, help=help, **decl)


def section_field(section: type, help: str, *, prefix: str | None = None, absent: str = "defaults") -> Any:
    """A nested section (a dataclass of declared fields). Left out, it is built from its
    own defaults (``absent="defaults"``), None (``"none"``: an optional role or volume), or
    an error (``"required"``)."""
    decl: dict[str, Any] = {"kind": "section", "section": section, "prefix": prefix, "help": help}
    if absent == "defaults":
        return spec_field(factory=section, **decl)
    if absent == "none":
        return spec_field(None, **decl)
    assert absent == "required", absent
    return spec_field(**decl)


def choice_field(default: str | None, choices: Sequence[str], *, help_tail: str = "") -> Any:
    """A string field holding one of ``choices``: its pattern, its error and its help are
    written from the one list, so they cannot disagree."""

    def either(words: Sequence[str]) -> str:
        return f"{', '.join(words[:-1])} or {words[-1]}"

    return spec_field(
        default,
        kind="str",
        pattern="|".join(choices),
        rule=f"must be {either(choices)}",
        help=either([f"`{c}`" for c in choices]) + help_tail,
    )


@functools.cache
def declared(cls: type) -> tuple[tuple[dataclasses.Field[Any], Decl], ...]:
    """The declared fields of a spec class, in order (cached: a class's fields are fixed)."""
    return tuple((f, f.metadata["tfk"]) for f in dataclasses.fields(cls) if "tfk" in f.metadata)


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


class Errors:
    """Every error of one validation, each with its path; raised together at the end."""

    def __init__(self) -> None:
        self.items: list[SpecError] = []

    def add(self, exc: SpecError) -> None:
        if isinstance(exc, SpecErrors):
            self.items.extend(exc.errors)
        else:
            self.items.append(exc)

    def under(self, path: str) -> bool:
        """An error on ``path``, inside it or on a section holding it (``worker`` and
        ``worker.replicas`` are related both ways)."""
        return any(
            not path
            or e.field == path
            or e.field.startswith((path + ".", path + "["))
            or path.startswith((e.field + ".", e.field + "["))
            for e in self.items
        )

    def run(self, fn: Callable[[], object], *needs: str) -> None:
        """Run a rule unless a field it reads is wrong; collect its error."""
        if any(self.under(n) for n in needs):
            return
        try:
            fn()
        except SpecError as exc:
            self.add(exc)

    def take(self, fn: Callable[[], Any], fallback: Any = None) -> Any:
        """``fn()``'s value; on a :class:`SpecError`, the error is collected and
        ``fallback`` returned, so the next independent value is read too."""
        try:
            return fn()
        except SpecError as exc:
            self.add(exc)
            return fallback

    def raise_if_any(self) -> None:
        if len(self.items) == 1:
            raise self.items[0]
        if self.items:
            raise SpecErrors(self.items)


def _int(value: object, path: str, lo: int | None, hi: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(path, "must be an integer", value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise SpecError(path, f"must be between {lo} and {hi}", value)
    return value


def _number(decl: Decl, value: Any, path: str, role: str | None) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(path, "must be a number", value)
    lo, hi = decl.bounds(role)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise SpecError(path, f"must be between {lo} and {hi}", value)
    return value


def _bool(decl: Decl, value: Any, path: str, role: str | None) -> bool:
    if not isinstance(value, bool):
        raise SpecError(path, "must be true or false", value)
    return value


def _str(decl: Decl, value: Any, path: str, role: str | None) -> str:
    if not isinstance(value, str):
        raise SpecError(path, "must be a string", value)
    if decl.hi is not None and len(value) > decl.hi:
        raise SpecError(path, f"must be at most {decl.hi} characters", value)
    if decl.pattern is not None and not re.fullmatch(decl.pattern, value):
        raise SpecError(path, decl.rule or f"must match {decl.pattern}", value)
    return value


def _enum(decl: Decl, value: Any, path: str, role: str | None) -> enum.Enum:
    assert decl.choices is not None
    try:
        return decl.choices(value)
    except ValueError:
        names = ", ".join(str(c.value) for c in decl.choices)
        raise SpecError(path, decl.rule or f"must be one of {names}", value) from None


def _int_list(decl: Decl, value: Any, path: str, role: str | None) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise SpecError(path, "must be a list of integers", value)
    if decl.hi is not None:
        _bounded(value, path, decl.hi)
    return tuple(_int(v, f"{path}[{i}]", decl.lo, decl.hi) for i, v in enumerate(value))


#: how each kind is checked and coerced (sections are built by :func:`_field`)
_KINDS: dict[str, Callable[[Decl, Any, str, str | None], Any]] = {
    "int": lambda decl, value, path, role: _int(value, path, *decl.bounds(role)),
    "number": _number,
    "bool": _bool,
    "str": _str,
    "enum": _enum,
    "str_list": lambda decl, value, path, role: _str_list(value, path),
    "int_list": _int_list,
    "str_map": lambda decl, value, path, role: _str_map(value, path, keys=decl.keys),
}


def section_from(cls: type[_T], data: Any, where: str) -> _T:
    """A section built on its own, outside a whole spec: its unknown keys are raised
    together, as a whole spec raises all of its errors at once."""
    errors = Errors()
    built: _T = from_mapping(cls, data, where, errors)
    errors.raise_if_any()
    return built


def from_mapping(cls: type, data: Any, path: str, errors: Errors) -> Any:
    """A section's dataclass from a mapping (or the instance given); unknown keys are errors.
    The fields are checked by :func:`check_fields`, not here."""
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SpecError(path or "spec", "must be a mapping", data)
    names = [f.name for f in dataclasses.fields(cls)]
    try:
        _reject_unknown(data, names, path)
    except SpecError as exc:
        errors.add(exc)
    required = [f.name for f in dataclasses.fields(cls) if default_of(f) is dataclasses.MISSING]
    kwargs = {k: v for k, v in data.items() if k in names}
    for name in required:
        kwargs.setdefault(name, None)
    return _unchecked(cls, kwargs)


def _unchecked(cls: type, kwargs: Mapping[str, Any]) -> Any:
    """An instance without running ``__post_init__``: the caller checks its fields."""
    obj: Any = object.__new__(cls)
    for f in dataclasses.fields(cls):
        value = kwargs[f.name] if f.name in kwargs else default_of(f)
        object.__setattr__(obj, f.name, value)
    return obj


def check_fields(obj: Any, where: str, errors: Errors, role: str | None = None) -> None:
    """Check and coerce every declared field of ``obj`` (a spec dataclass), sections
    included, adding each error to ``errors``; then the class's own ``_rules``."""
    cls: type = type(obj)
    for f, decl in declared(cls):
        path = join(where, f.name)
        value = getattr(obj, f.name)
        try:
            value = _field(obj, f, decl, value, path, errors, role)
        except SpecError as exc:
            errors.add(exc)
            continue
        object.__setattr__(obj, f.name, value)
    rules = getattr(obj, "_rules", None)
    if rules is not None:
        rules(where, errors)


def _field(
    obj: Any, f: dataclasses.Field[Any], decl: Decl, value: Any, path: str, errors: Errors, role: str | None
) -> Any:
    if value is None:
        if decl.required:
            raise SpecError(path, "is required")
        if f.default is None:
            return None
        if decl.kind in ("section", "custom") and f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        elif decl.kind in ("str_list", "str_map", "sections"):
            value = default_of(f)
    if decl.kind == "section":
        assert decl.section is not None
        section = from_mapping(decl.section, value, path, errors)
        check_fields(section, path, errors, f.name)
        return section
    if decl.kind == "sections":
        return _sections(decl, value, path, errors, role)
    if decl.kind != "custom":
        value = _KINDS[decl.kind](decl, value, path, role)
    return value if decl.check is None else decl.check(value, path)


def _sections(decl: Decl, value: Any, path: str, errors: Errors, role: str | None) -> tuple[Any, ...]:
    """A list of sections (tolerations, peers), each item checked on its own."""
    assert decl.section is not None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise SpecError(path, "must be a list", value)
    if decl.hi is not None:
        _bounded(value, path, decl.hi)
    items = []
    for i, item in enumerate(value):
        at = f"{path}[{i}]"
        try:
            built = from_mapping(decl.section, item, at, errors)
        except SpecError as exc:
            errors.add(exc)
            continue
        check_fields(built, at, errors, role)
        items.append(built)
    return tuple(items)


def validate(obj: Any) -> None:
    """Check a whole spec object (its ``__post_init__``); raise every error at once."""
    errors = Errors()
    check_fields(obj, "", errors)
    errors.raise_if_any()
