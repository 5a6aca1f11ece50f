"""``airflow-tfk sweep trials STORAGE``: a study's table of trials and its picture, from
the file a sweep left (a real Optuna SQLite study)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_tfk.cli.main import main
from tests.sweep.test_picture import _study


@pytest.fixture
def study_file(tmp_path: Path) -> Path:
    db = tmp_path / "s.db"
    _study(f"sqlite:///{db}")
    return db


def test_the_table_then_the_picture(study_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = study_file.read_bytes()
    assert main(["sweep", "trials", str(study_file)]) == 0
    assert study_file.read_bytes() == before  # read-only
    out = capsys.readouterr().out
    assert out.count("PRUNED") == 2 and out.count("COMPLETE") == 3
    assert "learning curves" in out and "parameter importance" in out
    svg = study_file.parent / "s.db.s1.svg"
    assert svg.is_file() and f"(as SVG: {svg})" in out


def test_json_rows_for_scripts(study_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "trials", str(study_file), "--study", "s1", "-o", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["number"] for r in rows] == [0, 1, 2, 3, 4]
    assert {r["state"] for r in rows} == {"COMPLETE", "PRUNED"}
    assert all(set(r["params"]) == {"lr", "width"} for r in rows)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--study", "nope"], 2, "--study: no study 'nope'"),
    ],
)
def test_a_study_that_is_not_there_is_named(
    study_file: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    assert main(["sweep", "trials", str(study_file), *args]) == code
    assert message in capsys.readouterr().err


def test_a_missing_file_or_a_file_that_is_no_study_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", "trials", str(tmp_path / "none.db")]) == 2
    assert "no such study file" in capsys.readouterr().err
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite at all" * 100)
    assert main(["sweep", "trials", str(junk)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not a readable study" in err and len(err.splitlines()) == 1
