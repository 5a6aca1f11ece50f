"""Param ``pattern``s that cannot backtrack catastrophically.

A Param's ``pattern`` is run by Python's ``re`` (through jsonschema) on the DAG processor
(the default), on the API server (every triggered run's conf) and in the form; ``re`` has no
timeout and cannot be interrupted from another thread, so a pattern such as ``^(a+)+$``
hangs whatever checks a long value. Bounding the match time is not possible there; refusing
the patterns that backtrack is. The rules (conservative: a refused pattern can always be
rewritten):

- anchored at the start (``^`` or ``\\A``): jsonschema *searches*, and an unanchored
  pattern retries from every position of a value that does not match;
- no backreference (matching them is NP-hard in general);
- a quantified part (``(...)+``, ``{2,}``) where one repetition can end in several places:
  a quantifier inside it whose characters the next repetition can also start with (or that
  is not followed by a character it cannot match), or an alternation whose branches can
  start with the same character (``(a+)+``, ``(a|ab)*``, ``(\\w+\\s?)*``);
- at most one unbounded quantifier that can give characters back to what follows it
  (``^.*a.*b$`` is quadratic, ``^a*a*a*$`` cubic).

Possessive quantifiers and atomic groups never backtrack and are always fine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from airflow_tfk.core.errors import SpecError

MAX_LENGTH = 1000
_SAMPLE = frozenset(chr(i) for i in range(256)) | frozenset("é中ß\u2028\u3000")
_ALL = _SAMPLE
_CATEGORY = {
    "CATEGORY_DIGIT": r"\d",
    "CATEGORY_NOT_DIGIT": r"\D",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w",
    "CATEGORY_NOT_WORD": r"\W",
}
_AMBIGUOUS_LIMIT = 1  # unbounded quantifiers that may give characters back


def _parser() -> Any:
    try:
        import re._parser as parser  # type: ignore[import-not-found]  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse as parser
    return parser


def _op(item: tuple[Any, Any]) -> str:
    return str(item[0])


def _in_set(members: Sequence[tuple[Any, Any]]) -> frozenset[str]:
    out: set[str] = set()
    negate = False
    for op, av in members:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            out.add(chr(av))
        elif name == "RANGE":
            out.update(c for c in _SAMPLE if av[0] <= ord(c) <= av[1])
        elif name == "CATEGORY" and str(av) in _CATEGORY:
            out.update(c for c in _SAMPLE if re.fullmatch(_CATEGORY[str(av)], c))
        else:
            return _ALL
    return _ALL - out if negate else frozenset(out)


def _char_set(item: tuple[Any, Any]) -> frozenset[str] | None:
    """The characters a one-character element matches (None: not one character)."""
    name, av = _op(item), item[1]
    if name == "LITERAL":
        return frozenset({chr(av)})
    if name == "NOT_LITERAL":
        return _ALL - {chr(av)}
    if name == "ANY":
        return _ALL - {"\n"}
    if name == "IN":
        return _in_set(av)
    return None


def _is_repeat(item: tuple[Any, Any]) -> bool:
    return _op(item) in ("MAX_REPEAT", "MIN_REPEAT")


def _can_be_empty(item: tuple[Any, Any]) -> bool:
    name = _op(item)
    if name == "AT":
        return True
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        return item[1][0] == 0 or all(_can_be_empty(i) for i in item[1][2])
    if name == "SUBPATTERN":
        return all(_can_be_empty(i) for i in item[1][3])
    return False


def _first(seq: Sequence[tuple[Any, Any]]) -> frozenset[str]:
    """The characters a match of ``seq`` can start with (a superset)."""
    out: frozenset[str] = frozenset()
    for item in seq:
        name = _op(item)
        chars = _char_set(item)
        if chars is not None:
            return out | chars
        if name == "AT":
            continue
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            out |= _first(item[1][2])
        elif name == "SUBPATTERN":
            out |= _first(item[1][3])
        elif name == "ATOMIC_GROUP":
            out |= _first(item[1])
        elif name == "BRANCH":
            for branch in item[1][1]:
                out |= _first(branch)
        else:
            return _ALL
        if not _can_be_empty(item):
            return out
    return out


def _repeat_set(item: tuple[Any, Any]) -> frozenset[str]:
    body = item[1][2]
    if len(body) == 1 and _char_set(body[0]) is not None:
        return _char_set(body[0]) or frozenset()
    return _ALL


def _ends_at_a_fixed_place(seq: Sequence[tuple[Any, Any]], index: int, then: frozenset[str]) -> bool:
    """Whether the repeat at ``seq[index]`` must stop before a character it cannot match:
    the next mandatory element of ``seq`` (or ``then``, what may follow ``seq``)."""
    chars = _repeat_set(seq[index])
    rest = seq[index + 1 :]
    following = _first(rest) if rest else frozenset()
    if all(_can_be_empty(i) for i in rest):
        following |= then
    return not (chars & following)


def _walk(seq: Sequence[tuple[Any, Any]]) -> Iterator[tuple[Sequence[tuple[Any, Any]], int]]:
    """Every (sequence, index) of the tree, outside possessive and atomic parts."""
    for index, item in enumerate(seq):
        yield seq, index
        name, av = _op(item), item[1]
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            yield from _walk(av[2])
        elif name == "SUBPATTERN":
            yield from _walk(av[3])
        elif name == "BRANCH":
            for branch in av[1]:
                yield from _walk(branch)
        elif name in ("ASSERT", "ASSERT_NOT"):
            yield from _walk(av[1])


def _repetition_problem(body: Sequence[tuple[Any, Any]]) -> str | None:
    starts = _first(body)
    for seq, index in _walk(body):
        item = seq[index]
        if _is_repeat(item) and item[1][0] != item[1][1]:
            if not _ends_at_a_fixed_place(seq, index, starts):
                return "a quantified part holds a quantifier that can end in several places, such as (a+)+"
        if _op(item) == "BRANCH":
            seen: frozenset[str] = frozenset()
            for branch in item[1][1]:
                first = _first(branch)
                if first & seen or not branch:
                    return (
                        "a quantified part holds an alternation whose branches start alike, such as (a|ab)+"
                    )
                seen |= first
    return None


def _problem(tree: Sequence[tuple[Any, Any]]) -> str | None:
    ambiguous = 0
    for seq, index in _walk(tree):
        item = seq[index]
        name = _op(item)
        if name in ("GROUPREF", "GROUPREF_EXISTS"):
            return "uses a backreference"
        if not _is_repeat(item):
            continue
        low, high, body = item[1]
        if high > 1:
            problem = _repetition_problem(body)
            if problem is not None:
                return problem
        if low != high and high > 1 and not _ends_at_a_fixed_place(seq, index, frozenset()):
            ambiguous += 1
            if ambiguous > _AMBIGUOUS_LIMIT:
                return "more than one quantifier can give characters back to what follows, such as ^.*a.*b$"
    return None


def check_pattern(pattern: object, field: str) -> None:
    """Refuse ``pattern`` (a Param's ``pattern``) unless it is safe to run on any value,
    with a :class:`SpecError` naming ``field``."""
    if not isinstance(pattern, str):
        raise SpecError(field, "must be a string (a regular expression)", pattern)
    if len(pattern) > MAX_LENGTH:
        raise SpecError(field, f"must be at most {MAX_LENGTH} characters", pattern)
    try:
        re.compile(pattern)
        tree = _parser().parse(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise SpecError(field, f"is not a valid regular expression: {exc}", pattern) from None
    items = list(tree)
    if not items or _op(items[0]) != "AT" or str(items[0][1]) not in ("AT_BEGINNING", "AT_BEGINNING_STRING"):
        raise SpecError(
            field,
            "must start with ^ (the value is searched: an unanchored pattern is retried at every position)",
        )
    problem = _problem(items)
    if problem is not None:
        raise SpecError(
            field,
            f"may backtrack catastrophically ({problem}); a long value would hang the DAG processor "
            "or the API server: rewrite it, e.g. with a possessive quantifier (a++) or an atomic group",
            pattern,
        )


def check_schema_patterns(schema: Any, where: str) -> None:
    """:func:`check_pattern` on every ``pattern`` and ``patternProperties`` key of a Param's
    JSON schema, at any depth (``items``, ``properties``...)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern":
                check_pattern(value, f"{where}.pattern")
            elif key == "patternProperties" and isinstance(value, dict):
                for i, name in enumerate(value):
                    check_pattern(name, f"{where}.patternProperties[{i}]")
                    check_schema_patterns(value[name], f"{where}.patternProperties[{i}]")
            else:
                check_schema_patterns(value, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            check_schema_patterns(value, f"{where}[{i}]")
