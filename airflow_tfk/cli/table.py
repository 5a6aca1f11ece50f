"""The command line's sub-commands as data: a name, its help, and its arguments. One loop
turns a table into argparse parsers, so adding a command or an option is one entry, not a
new function of ``add_parser``/``add_argument`` calls. Import-free beyond argparse."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: One ``add_argument`` call: its flags (or positional name) and its keyword options.
Arg = tuple[tuple[str, ...], dict[str, Any]]


def arg(*flags: str, **options: Any) -> Arg:
    return flags, options


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    description: str | None = None
    arguments: tuple[Arg, ...] = ()


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    commands: Iterable[Command],
    parents: Sequence[argparse.ArgumentParser] = (),
) -> dict[str, argparse.ArgumentParser]:
    """A parser per command, under ``sub``, each with the ``parents``' options too."""
    made = {}
    for command in commands:
        parser = sub.add_parser(
            command.name, help=command.help, description=command.description, parents=list(parents)
        )
        for flags, options in command.arguments:
            parser.add_argument(*flags, **options)
        made[command.name] = parser
    return made


# -- -o table|json|yaml|plain: Airflow's listing convention (its CLI's AirflowConsole) ------
# Written here rather than imported: Airflow's console module pulls in rich and Airflow's
# plugin manager, seconds of imports for a command that prints a few rows.
OUTPUTS = ("table", "json", "yaml", "plain")


def output_arg() -> Arg:
    """``-o/--output``, as every Airflow listing command takes it."""
    return arg(
        "-o",
        "--output",
        choices=OUTPUTS,
        default="table",
        metavar="(table, json, yaml, plain)",
        help="output format (default: table)",
    )


def cell(value: Any) -> str:
    """A value as a table cell: nothing known is '-', as kubectl shows it."""
    if value is None or value == "":
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value)
    return str(value)


def format_rows(
    rows: Sequence[dict[str, Any]],
    output: str,
    columns: Sequence[str] | None = None,
    cells: dict[str, Callable[[Any], str]] | None = None,
) -> str:
    """``rows`` in ``output``'s format, ending with a newline.

    ``json`` and ``yaml`` carry every key with its value as data (nested owners, lists,
    null), for ``jq`` and scripts; ``table`` (Airflow's ``a | b`` under a ``=+=`` rule) and
    ``plain`` (aligned columns, for ``grep``/``awk``) show ``columns`` (default: every key),
    each value through its ``cells`` formatter, else :func:`cell`.
    """
    if output == "json":
        return json.dumps(list(rows), indent=2) + "\n"
    if output == "yaml":
        import yaml

        return yaml.safe_dump(list(rows), sort_keys=False, default_flow_style=False)
    if output not in ("table", "plain"):
        raise ValueError(f"unknown output format {output!r} (one of {', '.join(OUTPUTS)})")
    names = list(columns if columns is not None else (rows[0] if rows else ()))
    fmt = cells or {}
    grid = [names] + [[fmt.get(n, cell)(row.get(n)) for n in names] for row in rows]
    widths = [max(len(r[i]) for r in grid) for i in range(len(names))]
    if output == "plain":
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in grid]
    else:
        lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in grid]
        last = len(widths) - 1  # the outer columns have no padding at the edge
        rule = ("=" * (w + (i > 0) + (i < last)) for i, w in enumerate(widths))
        lines.insert(1, "+".join(rule))
    return "\n".join(lines) + "\n"


def format_record(record: dict[str, Any], output: str) -> str:
    """One record (``status``'s) as a JSON object or a YAML mapping."""
    if output == "json":
        return json.dumps(record, indent=2) + "\n"
    if output == "yaml":
        import yaml

        return yaml.safe_dump(record, sort_keys=False, default_flow_style=False)
    raise ValueError(f"a record has no {output!r} form (json or yaml)")
