"""What one ``execve`` may carry, and which commands the launcher can run without one.

Shared by the provider (the spec refuses a training whose task could not start) and the
runtime's launcher (which runs a Python script in its own process when an exec would be
refused), so both judge a command the same way. Pure: no third-party import.

Linux refuses an exec with ``E2BIG`` ("argument list too long") when one argument or one
``NAME=value`` environment string is ``MAX_ARG_STRLEN`` (32 pages: 128 KiB with 4 KiB
pages) or longer, counting its terminating NUL, or when all of them together, with their
pointers, pass a quarter of the stack limit (2 MiB under the usual 8 MiB). A host list of
thousands of tasks passes the first limit long before the second.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

#: the kernel's ``MAX_ARG_STRLEN`` with 4 KiB pages, the smallest page size Linux uses:
#: what a spec is checked against, as the node's page size is unknown there
MAX_ARG_STRLEN = 32 * 4096
#: the most characters one argument or ``NAME=value`` string may have (the NUL counts)
MAX_STRING_CHARS = MAX_ARG_STRLEN - 1

#: all of one exec's argument and environment strings (bytes, each with its NUL) and
#: their pointers: a quarter of the stack limit, under the usual 8 MiB (``ulimit -s``) of
#: containers and shells
MAX_EXEC_BYTES = 8 * 1024 * 1024 // 4
#: room left in it for what the platform does not write and cannot see when it checks a
#: spec: the image's ENV, the kubelet's KUBERNETES_* variables, variables from Secrets and
#: ConfigMaps (env_from, env_value_from), the local backend's inherited environment
UNSEEN_ENV_BYTES = 64 * 1024
POINTER_BYTES = 8

_PYTHON = re.compile(r"python[0-9.]*")
# Interpreter options that take a value (``-W error`` or ``-Werror``).
_OPTIONS_WITH_VALUE = ("-W", "-X")


def max_string_chars(page_size: int = 4096) -> int:
    return 32 * page_size - 1


def longest(strings: Iterable[str]) -> tuple[int, str]:
    """(length, string) of the longest of ``strings``; (0, "") for none."""
    best = (0, "")
    for s in strings:
        if len(s) > best[0]:
            best = (len(s), s)
    return best


def too_long(
    argv: Sequence[str], env: Iterable[tuple[str, str]], limit: int = MAX_STRING_CHARS
) -> str | None:
    """Why Linux would refuse to exec ``argv`` with ``env``, or None: names the first
    argument or variable over ``limit`` characters."""
    for i, arg in enumerate(argv):
        if len(arg) > limit:
            return f"argument {i} ({_head(arg)}) has {len(arg):,} characters"
    for name, value in env:
        size = len(name) + 1 + len(value)
        if size > limit:
            return f"the environment variable {name} has {size:,} characters (NAME=value)"
    return None


def exec_bytes(strings: Iterable[str]) -> int:
    """What ``strings`` (arguments, or ``NAME=value`` environment strings) take of an
    exec's room: UTF-8 bytes, a NUL and a pointer each."""
    return sum(len(s.encode("utf-8", "surrogatepass")) + 1 + POINTER_BYTES for s in strings)


def _head(text: str) -> str:
    return text if len(text) <= 40 else text[:30] + "..."


def digits_total(count: int) -> int:
    """``sum(len(str(i)) for i in range(count))``, without the loop."""
    total, width, low = 0, 1, 0
    while low < count:
        high = min(count, 10**width)
        total += (high - low) * width
        low, width = high, width + 1
    return total


def joined_chars(pattern: str, count: int, quoted: bool = False) -> int:
    """Length of ``",".join(pattern with {i} = 0..count-1)`` (each in double quotes with
    ``quoted``, as in JSON), computed without building it."""
    each = len(pattern) - len("{i}") + (2 if quoted else 0)
    return count * each + digits_total(count) + max(count - 1, 0)


def cluster_map_chars(patterns: Sequence[tuple[str, str, int]]) -> int:
    """Length of the compact JSON map ``{"role": ["address", ...], ...}`` of a cluster
    given as ``(role, address pattern, count)``, in that order."""
    roles = [len(f'"{r}":[]') + joined_chars(p, n, quoted=True) for r, p, n in patterns]
    return 2 + sum(roles) + max(len(roles) - 1, 0)


def tf_config_chars(patterns: Sequence[tuple[str, str, int]], role: str, index: int) -> int:
    """Length of the compact ``TF_CONFIG`` JSON the runtime builds (``TaskInfo.tf_config_json``)
    for that cluster and task."""
    task = len(f'"task":{{"type":"{role}","index":{index}}}')
    return len('{"cluster":,}') + cluster_map_chars(patterns) + task


class PythonCommand(NamedTuple):
    """A command that starts a Python program: ``<python> [options] script [args]`` or
    ``<python> [options] -m module [args]``. (A named tuple: the spec's rules read commands
    at DAG parse time, where building a dataclass class costs several times as much.)

    :param interpreter: the first word, as written (``python3``, ``/usr/bin/python``).
    :param options: the interpreter's options before the program.
    :param script: the script's path, or None for a module.
    :param module: the module's name, or None for a script.
    :param args: the program's own arguments (its ``sys.argv[1:]``).
    """

    interpreter: str
    options: tuple[str, ...]
    script: str | None
    module: str | None
    args: tuple[str, ...]


def python_command(cmd: Sequence[str]) -> PythonCommand | None:
    """``cmd`` read as a Python program, or None when it is not one the launcher could run
    in its own process (another program, ``-c``, a script from stdin)."""
    if not cmd or not _PYTHON.fullmatch(cmd[0].rsplit("/", 1)[-1]):
        return None
    options: list[str] = []
    i = 1
    while i < len(cmd):
        word = cmd[i]
        if word == "-m":
            if i + 1 >= len(cmd):
                return None
            return PythonCommand(cmd[0], tuple(options), None, cmd[i + 1], tuple(cmd[i + 2 :]))
        if word == "--":
            i += 1
            break
        if word == "-" or not word.startswith("-"):
            break
        if word in _OPTIONS_WITH_VALUE:
            if i + 1 >= len(cmd):
                return None
            options += [word, cmd[i + 1]]
            i += 2
            continue
        if word.startswith("--") or (
            not word.startswith(_OPTIONS_WITH_VALUE) and ("c" in word or "m" in word)
        ):
            return None  # -c, long options (--version...), -m joined to other flags
        options.append(word)
        i += 1
    if i >= len(cmd) or cmd[i] == "-":
        return None
    return PythonCommand(cmd[0], tuple(options), cmd[i], None, tuple(cmd[i + 1 :]))
