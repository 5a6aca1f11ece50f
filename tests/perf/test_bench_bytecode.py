"""The benchmarks that time fresh interpreters run them with bytecode, as an installed
wheel's interpreter would, whatever the environment of the caller says."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("bench_common", ROOT / "bench" / "_common.py")
assert _spec is not None and _spec.loader is not None
bench_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_common)


def test_fresh_interpreters_write_bytecode_under_an_inherited_dontwritebytecode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/nonexistent/pycache")
    code = "import sys; print(float(sys.dont_write_bytecode or sys.pycache_prefix is not None))"
    assert bench_common.python_seconds(code) == 0.0
