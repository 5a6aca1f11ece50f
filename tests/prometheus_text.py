"""A strict reader of Prometheus' text exposition format 0.0.4, for tests.

The project does not depend on ``prometheus_client``, so the tests that scrape a training
read what they got with this, following the format's specification
(https://prometheus.io/docs/instrumenting/exposition_formats/): a line that is not a
``# HELP``, ``# TYPE``, other comment, blank line or well-formed sample is an error, as
are a second HELP or TYPE for a name, a TYPE after the family's samples, the same series
twice, a negative or non-finite counter, and a text whose last line has no line feed.
"""

from __future__ import annotations

import dataclasses
import math
import re

TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})?[ \t]+(\S+)(?:[ \t]+(-?\d+))?[ \t]*$")
_PAIR = re.compile(rf'[ \t]*({_LABEL})[ \t]*=[ \t]*"((?:[^"\\\n]|\\[\\"n])*)"[ \t]*(,|$)')
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


class ExpositionError(ValueError):
    def __init__(self, line_no: int, line: str, why: str) -> None:
        super().__init__(f"line {line_no}: {why}: {line!r}")


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None = None


@dataclasses.dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str | None = None
    typed: bool = False  # a TYPE line was read
    samples: list[Sample] = dataclasses.field(default_factory=list)


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def _labels(text: str, line_no: int, line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _PAIR.match(text, pos)
        if not m:
            raise ExpositionError(line_no, line, f"malformed label set at {text[pos:]!r}")
        if m.group(1) in out:
            raise ExpositionError(line_no, line, f"label {m.group(1)} twice")
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def _value(text: str, line_no: int, line: str) -> float:
    if text in ("+Inf", "Inf"):
        return math.inf
    if text == "-Inf":
        return -math.inf
    if text == "NaN":
        return math.nan
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        raise ExpositionError(line_no, line, f"not a number: {text!r}")
    return float(text)


def _family_of(name: str, families: dict[str, Family]) -> str:
    for fam in families.values():
        if any(name == fam.name + s for s in _SUFFIXES.get(fam.type, ())):
            return fam.name
    return name


def parse(text: str) -> dict[str, Family]:
    """The families of ``text`` by name; :class:`ExpositionError` names the first bad line."""
    if text and not text.endswith("\n"):
        raise ExpositionError(
            text.count("\n") + 1, text.rsplit("\n", 1)[-1], "the last line has no line feed"
        )
    families: dict[str, Family] = {}
    seen_series: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    closed: set[str] = set()  # families whose samples ended (another family's began)
    current: str | None = None
    for no, line in enumerate(text.split("\n")[:-1], start=1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line[1:].strip().split(None, 2)
            if len(parts) >= 2 and parts[0] in ("HELP", "TYPE"):
                kind, name = parts[0], parts[1]
                if not re.fullmatch(_NAME, name):
                    raise ExpositionError(no, line, f"bad metric name {name!r}")
                fam = families.setdefault(name, Family(name))
                if kind == "HELP":
                    if fam.help is not None:
                        raise ExpositionError(no, line, f"second HELP for {name}")
                    fam.help = _unescape(parts[2] if len(parts) > 2 else "")
                else:
                    if len(parts) != 3 or parts[2] not in TYPES:
                        raise ExpositionError(no, line, f"TYPE must be one of {TYPES}")
                    if fam.samples or fam.typed:
                        raise ExpositionError(no, line, f"TYPE for {name} after its samples or twice")
                    fam.type = parts[2]
                    fam.typed = True
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ExpositionError(no, line, "not a sample line")
        name, raw_labels, raw_value, ts = m.groups()
        family = _family_of(name, families)
        if family in closed:
            raise ExpositionError(no, line, f"samples of {family} are not together")
        if current is not None and current != family:
            closed.add(current)
        current = family
        fam = families.setdefault(family, Family(family))
        labels = _labels(raw_labels or "", no, line)
        value = _value(raw_value, no, line)
        if fam.type == "counter" and not (math.isfinite(value) and value >= 0):
            raise ExpositionError(no, line, "a counter must be finite and not negative")
        key = (name, tuple(sorted(labels.items())))
        if key in seen_series:
            raise ExpositionError(no, line, "the same series twice")
        seen_series.add(key)
        fam.samples.append(Sample(name, labels, value, int(ts) if ts is not None else None))
    return families


def value(families: dict[str, Family], name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    family = families[_family_of(name, families)]
    found = [s.value for s in family.samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, (name, labels, family.samples)
    return found[0]
