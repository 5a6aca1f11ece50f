"""The test tree must not shadow an installed package: conftest files put ``tests/`` on
``sys.path`` (for ``k8s`` and ``k8s_integration``), so a test package named like one (a
``tests/tensorboard/`` did) replaces it for every test of the session, and TensorFlow's
summaries then fail with ``No module named 'tensorboard.summary'``."""

from __future__ import annotations

from importlib.metadata import packages_distributions
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_package_or_module_is_named_like_an_installed_package() -> None:
    installed = set(packages_distributions())
    ours = {p.parent.name for p in TESTS.glob("*/__init__.py")} | {p.stem for p in TESTS.glob("*.py")}
    assert not ours & installed, sorted(ours & installed)
