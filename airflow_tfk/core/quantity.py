"""Kubernetes resource quantities (``500m``, ``2Gi``, ``1e3``), checked as the API server
reads them: ASCII digits only (Python's ``\\d`` would also take ``１`` and ``١``), a bounded
length and magnitude, greater than zero.
"""

from __future__ import annotations

import math
import re

from airflow_tfk.core.errors import SpecError

__all__ = ["parse_quantity", "quantity_value"]

# re.ASCII: [0-9] is what the API server's parser accepts.
_NUMBER = r"[+]?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_QUANTITY = re.compile(rf"^{_NUMBER}(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$", re.ASCII)
_SPLIT = re.compile(rf"^{_NUMBER}(.*)$", re.ASCII)
MAX_LENGTH = 64
# Kubernetes keeps quantities as int64 milli-units at most: about 9.2e15 whole units.
MAX_VALUE = 2.0**63 / 1000
_RULE = "must be a Kubernetes quantity such as '500m' or '2Gi'"

_SUFFIX = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "": 1.0,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def quantity_value(text: str) -> float:
    """The numeric value of a quantity already checked by :func:`parse_quantity`
    (``inf`` when it overflows a float)."""
    m = _SPLIT.match(text)
    if m is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = float(m.group(1)), m.group(2)
    if suffix not in _SUFFIX and suffix[:1] in ("e", "E"):
        exponent = int(suffix[1:])
        if exponent > 400:
            return math.inf
        if exponent < -400:
            return 0.0
        try:
            return number * 10.0**exponent
        except OverflowError:
            return math.inf
    return number * _SUFFIX[suffix]


def parse_quantity(value: object, where: str) -> str:
    """Check a Kubernetes quantity and return it as a string."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SpecError(where, _RULE, value)
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(where, "must be a finite quantity", value)
    if isinstance(value, int) and value.bit_length() > 64:
        raise SpecError(where, "is too large for a Kubernetes quantity", value)
    text = str(value).strip()
    if len(text) > MAX_LENGTH or not _QUANTITY.fullmatch(text):
        raise SpecError(where, _RULE + " (ASCII digits)", value)
    amount = quantity_value(text)
    if amount <= 0:
        raise SpecError(where, "must be greater than zero", value)
    if amount > MAX_VALUE:
        raise SpecError(where, "is too large for a Kubernetes quantity", value)
    return text
