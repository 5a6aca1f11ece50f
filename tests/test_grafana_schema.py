"""deploy/grafana/tfk-dashboard.json is a ``Dashboard`` by Grafana's own schema: the
``@grafana/schema`` package's types, with ``tsc --strict`` (deploy/grafana/schema_check.py).

The pinned npm packages are installed once per lock into ~/.cache/airflow-tfk; the test
skips only when npm cannot reach its registry for that first install. Dashboards broken
in the ways a hand edit breaks them are checked in the same compiler run, so a check
that stopped looking would fail here.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests import file_module
from tests.helpers import ROOT

DIR = ROOT / "deploy" / "grafana"
schema_check = file_module.load("tfk_schema_check", DIR / "schema_check.py")


def _broken(board: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    """Each a copy of ``board`` with one mistake, and the tsc error code it must give."""
    out = {}
    unknown = {**board, "refresh_every": "30s"}
    out["an unknown top-level key"] = (unknown, "TS2353")
    as_text = copy.deepcopy(board)
    as_text["panels"][1]["gridPos"]["w"] = "12"
    out["a width as text"] = (as_text, "TS2322")
    by_name = copy.deepcopy(board)
    by_name["panels"][1]["datasource"] = "prometheus"
    out["a datasource by name, not a reference"] = (by_name, "TS2559")
    numbers = copy.deepcopy(board)
    numbers["time"] = {"from": 6, "to": 0}
    out["a time range of numbers"] = (numbers, "TS2322")
    return out


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    board = json.loads((DIR / "tfk-dashboard.json").read_text(encoding="utf-8"))
    broken = _broken(board)
    try:
        found = schema_check.check({"committed": board, **{k: b for k, (b, _) in broken.items()}})
    except schema_check.RegistryUnreachable as e:
        pytest.skip(f"Grafana's schema package cannot be installed: {e}")
    assert found["committed"] == [], "\n".join(found["committed"])
    for name, (_, code) in broken.items():
        assert any(code in e for e in found[name]), (name, found[name])
