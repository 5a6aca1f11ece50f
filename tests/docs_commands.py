"""The commands a doc section tells a person to type, read from the doc itself, so a test
can run them as written (tests/e2e/test_day_two.py on the local backend,
tests/k8s_integration/test_day_two_docs.py against an API server)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def section(path: Path, heading: str) -> str:
    """``heading``'s section of ``path``: up to the next heading of its level or higher."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = lines.index(heading + "\n") + 1
    level = len(heading.split(" ", 1)[0])
    in_fence = False
    for i in range(start, len(lines)):
        if lines[i].startswith("```"):
            in_fence = not in_fence
        elif not in_fence and re.match(rf"#{{1,{level}}} ", lines[i]):
            return "".join(lines[start:i])  # a comment in a code block is not a heading
    return "".join(lines[start:])


def fenced(text: str, lang: str) -> list[str]:
    """The bodies of the fenced blocks in ``lang`` ("" for blocks without one)."""
    out, body, open_lang = [], [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if open_lang is None:
                open_lang, body = line[3:].strip(), []
                continue
            if open_lang == lang:
                out.append("\n".join(body) + "\n")
            open_lang = None
        elif open_lang is not None:
            body.append(line)
    return out


def documented_commands(text: str, lang: str) -> list[tuple[list[str], str]]:
    """``(argv, comment)`` of each ``airflow-tfk`` line in the section's ``lang`` blocks."""
    out = []
    for block in fenced(text, lang):
        for line in block.splitlines():
            if line.startswith("airflow-tfk "):
                command, _, comment = line.partition(" #")
                out.append((shlex.split(command), comment.strip()))
    return out


def shown_runs(text: str) -> list[tuple[list[str], list[str]]]:
    """``(argv, printed lines)`` of each ``$ airflow-tfk ...`` in the section's output blocks."""
    out: list[tuple[list[str], list[str]]] = []
    for block in fenced(text, ""):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((shlex.split(line[2:]), []))
            elif out:
                out[-1][1].append(line)
    return out
