"""The command line's sub-commands as data: a name, its help, and its arguments. One loop
turns a table into argparse parsers, so adding a command or an option is one entry, not a
new function of ``add_parser``/``add_argument`` calls. Import-free beyond argparse."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
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
