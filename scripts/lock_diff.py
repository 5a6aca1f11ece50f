"""Print the packages whose pinned versions differ between two uv/pip lock files."""

from __future__ import annotations

import re
import sys
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)")


def pins(path: Path) -> dict[str, str]:
    """Package name (normalised as PEP 503 does) -> version, for every `name==version` line."""
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = _PIN.match(line)
        if m:
            found[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
    return found


def diff(old: dict[str, str], new: dict[str, str]) -> list[str]:
    rows = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name, "-"), new.get(name, "-")
        if before != after:
            rows.append(f"{name:45} {before:>16} -> {after}")
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: lock_diff.py OLD_LOCK NEW_LOCK", file=sys.stderr)
        return 2
    rows = diff(pins(Path(argv[0])), pins(Path(argv[1])))
    print("\n".join(rows) if rows else "no difference: the lock holds the newest allowed versions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
