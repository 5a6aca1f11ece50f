"""Every error of a file at once, each with its path and line, whichever kind of file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dagfactory.loader import load_yaml_lines as load_mapping
from airflow_tfk.spec.yaml_reader import load_yaml_mapping

MISREAD = "ps: {replicas: 1}\nworker: {replicas: 010}\nps_grace_seconds: 1:30\n"
SPEC_HEAD = "name: t\nimage: tf:1\ncommand: [python]\n"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_tfk.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def test_the_misread_numbers_are_refused_alike_by_both_readers():
    text = SPEC_HEAD + MISREAD
    with pytest.raises(SpecError) as spec_file:
        load_yaml_mapping(text)
    with pytest.raises(SpecError) as training_file:
        load_mapping(text)
    for info in (spec_file, training_file):
        got = [(e.field, e.line, e.value) for e in info.value.errors]
        assert got == [("worker.replicas", 5, "010"), ("ps_grace_seconds", 6, "1:30")]
    assert [e.rule for e in spec_file.value.errors] == [e.rule for e in training_file.value.errors]


def test_validate_reports_every_error_of_a_training_file_with_its_line(tmp_path: Path):
    (tmp_path / "t.yaml").write_text(
        "cluster:\n  image: tf:1\n  command: [python]\n  ps: {replicas: 1}\n"
        "  worker:\n    replicas: 0\n  port: 70000\n  mode: sideways\n  ps_grace_seconds: -5\n"
    )
    done = _cli("validate", str(tmp_path / "t.yaml"))
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert [e.split(": ")[1:3] for e in errors] == [
        [f"{tmp_path / 't.yaml'}:6", "cluster.worker.replicas"],
        [f"{tmp_path / 't.yaml'}:7", "cluster.port"],
        [f"{tmp_path / 't.yaml'}:8", "cluster.mode"],
        [f"{tmp_path / 't.yaml'}:9", "cluster.ps_grace_seconds"],
    ]


def test_the_training_file_and_the_spec_file_report_the_misread_numbers_the_same(tmp_path: Path):
    (tmp_path / "t.yaml").write_text(
        "cluster:\n  image: tf:1\n  command: [python]\n"
        + MISREAD.replace("ps:", "  ps:")
        .replace("\nworker", "\n  worker")
        .replace("\nps_grace", "\n  ps_grace")
    )
    (tmp_path / "s.yaml").write_text(SPEC_HEAD + MISREAD)
    training = _cli("validate", str(tmp_path / "t.yaml")).stderr
    spec = _cli("render", str(tmp_path / "s.yaml")).stderr
    for out in (training, spec):
        assert "worker.replicas: is a YAML 1.1 number form" in out and "(got '010')" in out
        assert "ps_grace_seconds: is a YAML 1.1 number form" in out and "(got '1:30')" in out
    assert "error: worker.replicas: is a YAML 1.1" in spec and f"({tmp_path / 's.yaml'}, line 5)" in spec
    assert f"({tmp_path / 's.yaml'}, line 6)" in spec
    assert f"{tmp_path / 't.yaml'}:5: cluster.worker.replicas" in training


def test_the_training_files_own_settings_and_its_cluster_are_reported_together(tmp_path: Path):
    (tmp_path / "t.yaml").write_text(
        "retries: -1\nschedule: '@sometimes'\ncatchup: maybe\n"
        "cluster:\n  image: tf:1\n  command: [python]\n  ps: {replicas: 1}\n  worker: {replicas: 0}\n"
    )
    done = _cli("validate", str(tmp_path / "t.yaml"))
    fields = [line.split(": ")[2] for line in done.stderr.splitlines() if line.startswith("error:")]
    assert fields == ["retries", "schedule", "catchup", "cluster.worker.replicas"], done.stderr
