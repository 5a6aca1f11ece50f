"""scripts/node_lane_selects.py: scripts/test.sh starts the real-node lane only when its
-m expression can match a node test, so the fast lane does not pay for collecting it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests import file_module

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "node_lane_selects.py"
lane = file_module.load("node_lane_selects", SCRIPT)


@pytest.mark.parametrize(
    ("expr", "could"),
    [
        ("not e2e and not slow and not k8s and not k8s_node", False),  # the README's fast lane
        ("not k8s_node", False),
        ("not (k8s_node or e2e)", False),
        ("slow and not k8s_node", False),
        ("k8s_node", True),
        ("e2e", True),  # a node test may carry e2e too
        ("e2e or not k8s_node", True),
        ("not e2e", True),
        ("training_image and k8s_node", True),
        ("no such (syntax", True),  # pytest reports it; the lane is not skipped on a guess
    ],
)
def test_only_expressions_no_node_test_can_match_skip_the_lane(expr: str, could: bool) -> None:
    assert lane.could_select(expr) is could


def test_the_last_m_wins_and_no_m_runs_the_lane() -> None:
    assert lane.markexpr(["-q", "-m", "e2e", "-mnot k8s_node"]) == "not k8s_node"
    assert lane.markexpr(["-q", "-ra"]) is None
    run = [sys.executable, str(SCRIPT)]
    assert subprocess.run([*run, "-n", "2", "-m", "not k8s_node"], timeout=60).returncode == 1
    assert subprocess.run([*run, "-q"], timeout=60).returncode == 0


def test_every_node_module_carries_the_k8s_node_marker() -> None:
    """The premise: a node test always has ``k8s_node`` among its markers."""
    for module in sorted((ROOT / "tests" / "k8s_node").glob("test_*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        marks = [
            ast.unparse(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
        ]
        assert marks and "pytest.mark.k8s_node" in marks[0], module.name
