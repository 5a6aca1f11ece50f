"""README.md's compatibility table is what scripts/compat.sh writes: one marked section, in
the script's format (rows lowest and newest; the versions it measured; pass, fail or not
run for each of its checks), and a failure in the table is explained under it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import file_module

ROOT = Path(__file__).resolve().parents[1]
compat = file_module.load("compat", ROOT / "scripts" / "compat.py")

README = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
VERSION = re.compile(r"^\d+(\.\d+)*([a-z]+\d+)?(\.post\d+)?$|^-$")


def section(text: str) -> str:
    return text[text.index(compat.BEGIN) : text.index(compat.END) + len(compat.END)]


def test_the_readme_section_is_in_the_scripts_format() -> None:
    measured, rows = compat.parse_section(README)
    assert [r.name for r in rows] == list(compat.ROWS)
    # Written back by the script's own renderer, the section is unchanged: nobody edited it
    # by hand into something the script would not write.
    assert compat.render_section(rows, measured) == section(README)
    for row in rows:
        assert list(row.versions)[:1] == ["python"]
        assert all(VERSION.match(v) for v in row.versions.values()), row.versions
        assert set(row.results) == set(compat.CHECKS)


def test_every_failure_in_the_table_is_explained_under_it() -> None:
    _, rows = compat.parse_section(README)
    for row in rows:
        for check, result in row.results.items():
            if result != "pass":
                assert any(note.startswith(f"{check}: ") for note in row.notes), (row.name, check)


def test_the_table_columns_are_the_floors_of_the_wheel() -> None:
    """A floor in pyproject.toml (core or the local extra) the table does not show was never
    measured: the next run of the script adds its column."""
    import tomllib

    from packaging.requirements import Requirement

    with open(ROOT / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    reqs = [*project["dependencies"], *project["optional-dependencies"]["local"]]
    floored = {r.name for r in map(Requirement, reqs) if any(s.operator == ">=" for s in r.specifier)}
    _, rows = compat.parse_section(README)
    assert set(rows[0].versions) - {"python"} == floored


def test_a_section_in_another_format_is_refused() -> None:
    measured, rows = compat.parse_section(README)
    good = compat.render_section(rows, measured)
    for bad in (
        good.replace("| lowest |", "| oldest |"),
        good.replace("| pass |", "| ok |", 1),
        good.replace("Measured by", "Measured with"),
        good + "\n" + compat.BEGIN,
    ):
        with pytest.raises(ValueError):
            compat.parse_section(bad)
