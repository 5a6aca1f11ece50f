"""The committed lock (requirements/lock.txt, scripts/lock.sh) is what bootstrap installs."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests import file_module
from tests.helpers import ROOT as REPO

lock_diff = file_module.load("lock_diff", REPO / "scripts" / "lock_diff.py")

LOCK = REPO / "requirements" / "lock.txt"


def _direct_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in ("test", "local", "validate"):
        found += [Requirement(r) for r in project["optional-dependencies"][extra]]
    for line in (REPO / "requirements" / "tools.in").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            found.append(Requirement(line))
    return found


def test_every_direct_requirement_is_locked_within_its_range() -> None:
    """A range edited in pyproject.toml without `bash scripts/lock.sh` fails here, not on a
    fresh machine."""
    pins = lock_diff.pins(LOCK)
    wrong = []
    for req in _direct_requirements():
        version = pins.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{req} (locked: {version})")
    assert not wrong, "requirements/lock.txt is stale; run bash scripts/lock.sh: " + ", ".join(wrong)


def test_the_lock_leaves_out_the_full_tensorflow() -> None:
    """tensorflow-cpu provides the `tensorflow` module; the full package would be a second copy."""
    pins = lock_diff.pins(LOCK)
    assert "tensorflow-cpu" in pins and "tensorflow" not in pins


def test_every_locked_package_carries_its_hashes_and_bootstrap_requires_them() -> None:
    """A package index that served other bytes under a locked version fails the install
    (uv checks every hash under --require-hashes) instead of entering the environment."""
    text = LOCK.read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])  # after the header
    pinned = [e for e in entries if "==" in e.splitlines()[0]]
    assert len(pinned) == len(lock_diff.pins(LOCK))
    missing = [e.splitlines()[0] for e in pinned if not re.search(r"--hash=sha256:[0-9a-f]{64}", e)]
    assert not missing, missing
    bootstrap = (REPO / "scripts" / "bootstrap.sh").read_text()
    assert re.search(r"uv\" pip sync [^\n]*--require-hashes", bootstrap)
    assert "--generate-hashes" in (REPO / "scripts" / "lock.sh").read_text()


def test_lock_diff_names_changed_added_and_removed_packages(tmp_path: Path) -> None:
    old = tmp_path / "old.txt"
    new = tmp_path / "new.txt"
    old.write_text("PyYAML==6.0.3\n    # via x\nkeep==1\ngone==2\n")
    new.write_text("pyyaml==6.0.4\nkeep==1\nnew_pkg==3 ; python_version >= '3.11'\n")
    rows = lock_diff.diff(lock_diff.pins(old), lock_diff.pins(new))
    assert [r.split()[0] for r in rows] == ["gone", "new-pkg", "pyyaml"]
    assert rows[2].split()[1:] == ["6.0.3", "->", "6.0.4"]


def test_the_venv_the_readme_command_made_holds_exactly_the_lock() -> None:
    """The README's commands install exactly the lock (bootstrap's ``uv pip sync
    --require-hashes``): the venv this suite runs in lists the locked packages at their
    locked versions, nothing more, nothing less (and this project, editable). Two fresh
    venvs from the lock are then identical, without building two more (which took ~100 s)."""
    import sys

    venv = Path(sys.executable).parent
    uv = venv / "uv"
    if not uv.exists():
        pytest.skip(f"not run from a venv that scripts/bootstrap.sh made ({venv} has no uv)")
    out = subprocess.run(
        [str(uv), "pip", "freeze", "--python", sys.executable], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    frozen = {canonicalize_name(line.split("==")[0]): line.split("==")[1] for line in out if "==" in line}
    others = [line for line in out if "==" not in line]
    assert others == [f"-e {REPO.as_uri()}"], others
    pins = lock_diff.pins(LOCK)
    assert frozen == pins, lock_diff.diff(pins, frozen)
