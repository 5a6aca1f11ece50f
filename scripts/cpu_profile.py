"""Where a test run's CPU goes, by kind of process: the breakdown CI's time budget needs.

``scripts/cpu_profile.sh`` runs the test command with BSD process accounting on (one
record per process that exits: its command name, CPU time, pid, parent pid and start
time) and a hook in the venv that logs every venv Python's pid and command line when it
starts. This module joins the two (pid and start time: pids are reused within a run) and
sums the CPU by kind: the local training tasks by module, ``airflow`` commands, the CLI,
the pytest lanes, and every other program by its command name (the KWOK control plane,
containerd, the containers' Pythons outside the venv...).

    python scripts/cpu_profile.py ACCT_FILE ARGV_LOG [--top N]

Only processes that exited while accounting was on are counted; ones that started before
the argv log's first line are left out (another run's).
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import NamedTuple

#: seconds between a process's start as accounting records it (whole seconds) and as the
#: hook logged it
START_SLACK = 3.0


class Record(NamedTuple):
    """One accounted process."""

    comm: str
    cpu: float  # user + system seconds
    pid: int
    ppid: int
    start: float  # epoch seconds


def parse_dump(text: str) -> list[Record]:
    """Records from ``dump-acct``'s output (``comm|v3|utime|stime|etime|uid|gid|mem|io|
    pid|ppid|...|start``; times in hundredths of a second)."""
    records = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 11:
            continue
        try:
            start = time.mktime(time.strptime(fields[-1], "%a %b %d %H:%M:%S %Y"))
            cpu = (float(fields[2]) + float(fields[3])) / 100.0
            records.append(Record(fields[0], cpu, int(fields[9]), int(fields[10]), start))
        except ValueError:
            continue
    return records


def parse_argv_log(lines: Iterable[str]) -> dict[int, list[tuple[float, str]]]:
    """pid -> [(start, command line)] from the hook's ``pid<TAB>ppid<TAB>start<TAB>argv``
    lines (a ``-c`` script's own newlines make lines that are skipped)."""
    starts: dict[int, list[tuple[float, str]]] = collections.defaultdict(list)
    for line in lines:
        parts = line.rstrip("\n").split("\t", 3)
        if len(parts) == 4 and parts[0].isdigit():
            try:
                starts[int(parts[0])].append((float(parts[2]), parts[3]))
            except ValueError:
                continue
    return starts


def command_of(starts: dict[int, list[tuple[float, str]]], record: Record) -> str | None:
    """The logged command line of the venv Python this record is, if it is one."""
    best = None
    for start, argv in starts.get(record.pid, []):
        gap = abs(start - record.start)
        if gap <= START_SLACK and (best is None or gap < best[0]):
            best = (gap, argv)
    return None if best is None else best[1]


_MODULE = re.compile(r"(?:^|\s)-m\s+(\S+)")


def kind(record: Record, argv: str | None) -> str:
    """What a process was, for the table."""
    if argv is None:
        return f"program: {record.comm}"
    words = argv.split()
    module = _MODULE.search(argv)
    if module and module.group(1) == "pytest":
        return "pytest lane (its own work)"
    if "supervisor.py" in argv:
        return "local task supervisor"
    if module:
        name = module.group(1)
        if name.startswith("airflow_tfk.runtime"):
            return f"task: {name}"
        return f"python -m {name}"
    for word in words[1:3]:
        if word.endswith(("/airflow", "/airflow-tfk")) or word in ("airflow", "airflow-tfk"):
            verb = " ".join(w for w in words[words.index(word) + 1 :][:2] if not w.startswith("-"))
            return f"{word.rsplit('/', 1)[-1]} {verb}".strip()
    scripts = [w for w in words[1:] if w.endswith(".py")]
    if scripts:
        return f"script: {scripts[0].rsplit('/', 1)[-1]}"
    if len(words) > 1 and words[1] == "-c":
        return "python -c"
    return f"python: {' '.join(words[1:3])[:60]}"


def table(records: list[Record], starts: dict[int, list[tuple[float, str]]]) -> list[tuple[str, float, int]]:
    """(kind, CPU seconds, processes), most CPU first, of the processes of the run."""
    first = min((s for v in starts.values() for s, _ in v), default=0.0)
    cpu: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for record in records:
        if record.start < first - START_SLACK:
            continue
        name = kind(record, command_of(starts, record))
        cpu[name] += record.cpu
        count[name] += 1
    return [(name, seconds, count[name]) for name, seconds in cpu.most_common()]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("acct_file")
    parser.add_argument("argv_log")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    dump = subprocess.run(["dump-acct", args.acct_file], capture_output=True, text=True, check=True).stdout
    with open(args.argv_log, encoding="utf-8", errors="replace") as fh:
        starts = parse_argv_log(fh)
    rows = table(parse_dump(dump), starts)
    total = sum(seconds for _, seconds, _ in rows)
    print(f"CPU of the run's processes: {total / 60:.1f} CPU-min")
    print(f"{'CPU-min':>8} {'share':>6} {'procs':>6}  kind")
    for name, seconds, n in rows[: args.top]:
        print(f"{seconds / 60:8.2f} {100 * seconds / total if total else 0:5.1f}% {n:6d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
