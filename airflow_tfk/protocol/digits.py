"""Decimal text both sides read: ports, task indexes, model versions, lengths.

``int()`` alone is too lenient for names, headers and environment values: it takes other
scripts' digits (``int('٣') == 3``), signs, surrounding whitespace and underscores
(``int('1_0') == 10``). ``str.isdigit()`` alone is wrong the other way: it accepts ``'²'``,
which ``int()`` then refuses. A version directory, a port or a task index is plain ASCII
digits, as TF Serving and Kubernetes read them.
"""

from __future__ import annotations

# More digits than any port, index, version or length here: refusing them also keeps
# int() away from its 4,300-digit limit (a ValueError a caller would not expect).
MAX_DIGITS = 30


def plain_int(text: object) -> int | None:
    """The integer ``text`` spells in plain ASCII digits (at most ``MAX_DIGITS``), else None."""
    if isinstance(text, str) and 0 < len(text) <= MAX_DIGITS and text.isascii() and text.isdigit():
        return int(text)
    return None


def is_plain_int(text: object) -> bool:
    return plain_int(text) is not None


#: TF Serving's model versions are int64: 9223372036854775807 (19 digits) is one
MAX_VERSION = 2**63 - 1


def model_version(text: object) -> int | None:
    """The model version a directory name (or path segment) spells: plain ASCII digits
    up to :data:`MAX_VERSION`, as TF Serving reads them; else None."""
    number = plain_int(text)
    return number if number is not None and number <= MAX_VERSION else None
