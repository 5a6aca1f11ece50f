"""Bounded reads: ``tail`` agrees with reading the whole file wherever the lines fit in
its byte bound (generated files across block boundaries), and says what it left out
where they do not; JSON depth is measured without recursion."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from airflow_tfk.core import bounded_files
from airflow_tfk.core.bounded_files import UnsafeFileError, json_depth, read_json, tail


def _reference(text: str, lines: int | None) -> str:
    got = text.rstrip("\n").split("\n") if text else []
    kept = got if lines is None else got[-lines:] if lines else []
    return "".join(f"{line}\n" for line in kept)


@pytest.mark.parametrize("block", [1, 2, 7, 64])
@pytest.mark.parametrize("seed", range(40))
def test_tail_is_the_last_lines_when_they_fit(
    seed: int, block: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bounded_files, "BLOCK", block)  # many block boundaries in a small file
    rng = random.Random(seed)
    lines = ["x" * rng.randrange(0, 20) for _ in range(rng.randrange(0, 30))]
    text = "\n".join(lines) + ("\n" * rng.randrange(1, 3) if rng.random() < 0.7 and lines else "")
    path = tmp_path / "log"
    path.write_text(text)
    for n in (None, 0, 1, 2, 5, 29, 100):
        assert tail(path, n, max_bytes=10_000) == _reference(text, n), (n, text)


def test_tail_says_what_it_left_out_and_cuts_long_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("a" * 1000 + "\nshort\n")
    out = tail(path, 5, max_bytes=100, max_line=10)
    assert out.startswith("[... earlier output not shown: over 100 bytes]\n")
    assert out.endswith("\nshort\n") and "[... cut by airflow-tfk: longer than 10 bytes]" in out
    assert tail(path, 1, max_bytes=100) == "short\n"  # fits: nothing said


def test_json_depth_is_measured_without_recursion(tmp_path: Path) -> None:
    deep: list = []
    node = deep
    for _ in range(50_000):
        node.append([])
        node = node[0]
    assert json_depth(deep) == 50_001 and json_depth({"a": [1, {"b": 2}]}) == 3 and json_depth(1) == 0
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"a": {"b": {"c": 1}}}))
    assert read_json(path, max_bytes=100, max_depth=3) == {"a": {"b": {"c": 1}}}
    with pytest.raises(UnsafeFileError, match="nested deeper than 2"):
        read_json(path, max_bytes=100, max_depth=2)
    with pytest.raises(UnsafeFileError, match="larger than 10 bytes"):
        read_json(path, max_bytes=10, max_depth=9)
