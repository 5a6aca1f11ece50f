"""Checks tfk-dashboard.json against Grafana's own dashboard schema, offline once installed.

    .venv/bin/python deploy/grafana/schema_check.py   # exit 0: the dashboard is a Dashboard

Grafana publishes its dashboard schema (generated from the CUE kinds Grafana itself
validates with) as TypeScript types in the npm package ``@grafana/schema``; there is no
JSON Schema of it, and no Grafana server on this project's package registries. So the
dashboard is written into a TypeScript file as an object literal ``satisfies Dashboard``
and type-checked by ``tsc --strict``: every field must exist in the schema (an object
literal's unknown keys are errors) and have its type (a string where a number belongs,
a datasource given as a name instead of a reference, a time range of numbers...).

The two npm packages are pinned by ``schema-check/package-lock.json`` and installed with
``npm ci`` once per lock into ``~/.cache/airflow-tfk/grafana-schema/<hash>``; later checks
need neither the network nor npm, only ``node``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PINS = HERE / "schema-check"
DASHBOARD = HERE / "tfk-dashboard.json"
_UNREACHABLE = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network", re.I)
_DIAGNOSTIC = re.compile(r"^check\.ts\((\d+),\d+\): (error .*)$")


class RegistryUnreachable(RuntimeError):
    """npm could not reach its registry to install the pinned packages."""


class ToolMissing(RuntimeError):
    """``node`` or ``npm`` is not on PATH."""


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    lock = (PINS / "package-lock.json").read_bytes()
    return base / "airflow-tfk" / "grafana-schema" / hashlib.sha256(lock).hexdigest()[:16]


def install() -> Path:
    """The directory whose ``node_modules`` holds the pinned packages (installed if needed)."""
    target = cache_dir()
    if (target / "node_modules" / "@grafana" / "schema" / "package.json").is_file():
        return target
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise ToolMissing("node and npm are needed to install Grafana's schema package (@grafana/schema)")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Installed beside and renamed into place: a check that runs at the same time (or an
    # interrupted install) never sees half a node_modules.
    staging = Path(tempfile.mkdtemp(prefix=".install-", dir=target.parent))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(PINS / name, staging / name)
        run = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if run.returncode != 0:
            out = run.stdout + run.stderr
            if _UNREACHABLE.search(out):
                raise RegistryUnreachable(f"npm ci could not reach the registry: {out.strip()[-600:]}")
            raise RuntimeError(f"npm ci failed (exit {run.returncode}): {out.strip()[-2000:]}")
        try:
            staging.rename(target)
        except OSError:  # another check installed it first
            if not (target / "node_modules").is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def check(boards: dict[str, Any]) -> dict[str, list[str]]:
    """tsc's errors for each named dashboard (an empty list: it is a Grafana ``Dashboard``)."""
    root = install()
    node = shutil.which("node")
    if node is None:
        raise ToolMissing("node is needed to run the TypeScript compiler")
    lines = ['import type { Dashboard } from "@grafana/schema";', ""]
    spans: list[tuple[str, int, int]] = []
    for i, (name, board) in enumerate(boards.items()):
        start = len(lines) + 1
        body = json.dumps(board, indent=2).splitlines()
        lines += [f"export const board{i} = {body[0]}", *body[1:-1], f"{body[-1]} satisfies Dashboard;", ""]
        spans.append((name, start, len(lines)))
    config = {
        "compilerOptions": {
            "strict": True,
            "noEmit": True,
            "skipLibCheck": True,
            "module": "esnext",
            "moduleResolution": "bundler",
            "target": "es2022",
            "types": [],
        },
        "files": ["check.ts"],
    }
    with tempfile.TemporaryDirectory(prefix="check-", dir=root) as work:
        (Path(work) / "check.ts").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (Path(work) / "tsconfig.json").write_text(json.dumps(config), encoding="utf-8")
        tsc = root / "node_modules" / "typescript" / "bin" / "tsc"
        run = subprocess.run(
            [node, str(tsc), "-p", "tsconfig.json", "--pretty", "false"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
        )
    found: dict[str, list[str]] = {name: [] for name in boards}
    current: list[str] | None = None
    for line in run.stdout.splitlines():
        m = _DIAGNOSTIC.match(line)
        if m:
            at = int(m.group(1))
            owner = next((name for name, a, b in spans if a <= at < b), None)
            if owner is None:
                raise RuntimeError(f"tsc: {line}")  # the harness itself is wrong
            current = found[owner]
            current.append(f"line {at - next(a for n, a, _ in spans if n == owner) + 1}: {m.group(2)}")
        elif line.startswith(" ") and current is not None:
            current[-1] += "\n" + line
        elif line.strip():
            raise RuntimeError(f"tsc: {line}")
    if run.returncode not in (0, 2) or (run.returncode == 2) != any(found.values()):
        raise RuntimeError(f"tsc exited {run.returncode}: {run.stdout}{run.stderr}")
    return found


def main() -> int:
    errors = check({DASHBOARD.name: json.loads(DASHBOARD.read_text(encoding="utf-8"))})[DASHBOARD.name]
    for e in errors:
        print(f"{DASHBOARD.name}: {e}", file=sys.stderr)
    if not errors:
        print(f"{DASHBOARD.name}: a Dashboard of @grafana/schema (tsc --strict)")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
