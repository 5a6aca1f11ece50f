"""The release steps' invariants (docs/releasing.md): the version is written once, in
pyproject.toml, and everything that shows it reads the installed metadata; the changelog
has a section for it; the steps are written down."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import airflow_tfk
from airflow_tfk.provider_info import get_provider_info

ROOT = Path(__file__).resolve().parents[1]


def _pyproject_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_the_version_is_written_once_and_read_from_the_metadata_everywhere() -> None:
    written = _pyproject_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", written), written
    # a stale editable install (bootstrap not rerun after a bump) shows here
    assert version("airflow-tfk") == written
    assert airflow_tfk.__version__ == written
    assert get_provider_info()["versions"] == [written]
    # nowhere else in the package: a literal copy would drift at the next bump
    copies = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "airflow_tfk").rglob("*.py")
        if re.search(rf"""["']{re.escape(written)}["']""", p.read_text(encoding="utf-8"))
    ]
    assert not copies, copies


def test_the_changelog_opens_with_the_version_being_released() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (\d+\.\d+\.\d+)( \(unreleased\))?$", text, flags=re.M)
    assert headings, "CHANGELOG.md has no '## <version>' section"
    assert headings[0][0] == _pyproject_version()
    # every version appears once, newest first
    numbers = [tuple(int(x) for x in h[0].split(".")) for h in headings]
    assert numbers == sorted(set(numbers), reverse=True)
    # only the top section may be unreleased
    assert not any(h[1] for h in headings[1:])


def test_the_release_steps_are_written_down_and_linked() -> None:
    steps = (ROOT / "docs" / "releasing.md").read_text(encoding="utf-8")
    for needed in ("pyproject.toml", "CHANGELOG.md", "scripts/test.sh", "git tag", "provider_info"):
        assert needed in steps, needed
    assert "docs/releasing.md" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_provider_info_is_valid_for_airflows_providers_manager() -> None:
    import json

    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)
