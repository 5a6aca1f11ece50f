"""The benchmarks that time fresh interpreters run them with bytecode, as an installed
wheel's interpreter would, whatever the environment of the caller says."""

from __future__ import annotations

import pytest

from tests import file_module
from tests.helpers import ROOT

bench_common = file_module.load("bench_common", ROOT / "bench" / "_common.py")


def test_fresh_interpreters_write_bytecode_under_an_inherited_dontwritebytecode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/nonexistent/pycache")
    code = "import sys; print(float(sys.dont_write_bytecode or sys.pycache_prefix is not None))"
    assert bench_common.python_seconds(code) == 0.0
