"""`airflow-tfk --version`: the installed distribution's version, without loading Airflow."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest

import airflow_tfk
from airflow_tfk.cli.main import EXIT_USAGE, main

ROOT = Path(__file__).resolve().parents[2]


def pyproject_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def test_version_prints_the_installed_distribution_version_on_stdout():
    out = subprocess.run(
        [sys.executable, "-m", "airflow_tfk.cli.main", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    # pyproject.toml is where the version is written; the metadata is what was installed
    # from it (a stale install would differ).
    assert out.stdout == f"airflow-tfk {pyproject_version()}\n"
    assert airflow_tfk.__version__ == pyproject_version()


def test_version_loads_no_airflow():
    probe = (
        "import json, sys\n"
        "from airflow_tfk.cli.main import main\n"
        "try:\n"
        "    main(['--version'])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "heavy = ('airflow.', 'kubernetes')\n"
        "loaded = sorted(m for m in sys.modules if m == 'airflow' or m.startswith(heavy))\n"
        "print(json.dumps({'code': code, 'loaded': loaded}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout.strip().splitlines()[-1])
    assert reply == {"code": 0, "loaded": []}


def test_version_without_installed_metadata_says_so(monkeypatch, capsys):
    def missing() -> str:
        raise PackageNotFoundError(airflow_tfk.DISTRIBUTION)

    monkeypatch.setattr(airflow_tfk, "version", missing)
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == EXIT_USAGE
    out = capsys.readouterr()
    assert out.out == ""
    assert "no installed distribution 'airflow-tfk'" in out.err
