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
