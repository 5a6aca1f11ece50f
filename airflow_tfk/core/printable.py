"""Showing text from a training file safely: a path, a field or a value printed in a
terminal, a log line or the UI shows what it holds, never a control sequence.
"""

from __future__ import annotations


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
