"""The error names the README and docs quote are the ones the code raises: a reader who
writes ``except SpecError`` after reading the docs must catch what happens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_tfk.core import errors

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
QUOTED = re.compile(r"`([A-Z][A-Za-z]+(?:Error|Failed|Exception)): ([^`]+)`")


def _quoted() -> list[tuple[str, str, str]]:
    return [
        (str(p.relative_to(ROOT)), m.group(1), m.group(2))
        for p in DOCS
        for m in QUOTED.finditer(p.read_text(encoding="utf-8"))
    ]


def test_every_quoted_error_class_is_one_the_provider_raises() -> None:
    quoted = _quoted()
    assert any(name == "LocalMachineError" for _, name, _ in quoted), quoted
    for path, name, _ in quoted:
        assert isinstance(getattr(errors, name, None), type), f"{path}: {name} is not in core.errors"


def test_a_missing_script_is_the_error_the_readme_shows(tmp_path: Path) -> None:
    """The local backend refuses a script it cannot find with LocalMachineError (the same
    spec may run elsewhere), word for word as the README quotes it."""
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec

    assert not Path("/tmp/sums_app.py").exists()
    backend = LocalBackend(str(tmp_path / "root"), workdir="/tmp")
    spec = TFClusterSpec(
        name="sums",
        image="x:1",
        command=("python", "sums_app.py"),
        mode="all_reduce",
        worker=RoleSpec(replicas=1),
    )
    with pytest.raises(errors.LocalMachineError) as err:
        backend.create(spec)
    assert not isinstance(err.value, errors.SpecError)
    shown = f"{type(err.value).__name__}: {err.value}"
    documented = [f"{name}: {text}" for path, name, text in _quoted() if "sums_app.py" in text]
    assert documented == [shown]
