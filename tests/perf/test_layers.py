"""The import-linter contract "the runtime imports no provider module" lists the provider's
top-level modules by name (import-linter cannot say "all but"); a new module must join it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NEUTRAL = {"runtime", "protocol", "__init__"}


def test_every_provider_module_is_forbidden_to_the_runtime() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c.get("source_modules") == ["airflow_tfk.runtime", "airflow_tfk.protocol"]
    ]
    package = ROOT / "airflow_tfk"
    provider = {p.stem for p in package.glob("*.py")} | {p.parent.name for p in package.glob("*/__init__.py")}
    missing = {f"airflow_tfk.{m}" for m in provider - NEUTRAL} - set(contract["forbidden_modules"])
    assert not missing, f"add to the runtime contract in pyproject.toml: {sorted(missing)}"
