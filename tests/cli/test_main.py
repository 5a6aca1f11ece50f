"""`airflow-tfk render` in a subprocess, as a user pipes it into `kubectl apply -f -`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.helpers import IMAGENET, IMAGENET_OBJECTS, IMAGENET_STORAGE

# tests.helpers.IMAGENET as a user writes it (the bad-spec cases edit this text).
MINIMAL = """\
name: imagenet
image: tensorflow/tensorflow:2.21.0
mode: between_graph
command: ["python", "/opt/imagenet.py"]
ps: {replicas: 2}
worker: {replicas: 3}
storage: {data: {size: 10Gi}, logs: {size: 10Gi}, storage_class: glusterfs}
"""


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_tfk.cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "imagenet.yaml"
    path.write_text(MINIMAL)
    return path


def test_render_minimal_spec_prints_a_valid_stream(spec_file: Path):
    out = cli("render", str(spec_file))
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    docs = list(yaml.safe_load_all(out.stdout))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == IMAGENET_OBJECTS
    for doc in docs:
        for version in ("1.29", "1.37"):
            kubernetes_validate.validate(doc, version, strict=True)


def test_render_reads_stdin_and_takes_namespace_and_identity():
    out = cli(
        "render",
        "-",
        "--namespace",
        "ml",
        "--dag-id",
        "imagenet_daily",
        "--task-id",
        "train",
        "--run-id",
        "manual__2024-01-01T00:00:00+00:00",
        stdin=MINIMAL,
    )
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert {d["metadata"]["namespace"] for d in docs} == {"ml"}
    for doc in docs:
        assert (
            doc["metadata"]["annotations"]["tfk.airflow.apache.org/run-id"]
            == "manual__2024-01-01T00:00:00+00:00"
        )
        assert doc["metadata"]["labels"]["tfk.airflow.apache.org/dag-id"] == "imagenet_daily"


@pytest.mark.parametrize(
    "text, field",
    [
        (MINIMAL.replace("name: imagenet", "name: ImageNet"), "name"),
        (MINIMAL.replace("worker: {replicas: 3}", "worker: {replicas: 0}"), "worker.replicas"),
        (MINIMAL.replace("mode: between_graph", "mode: all_reduce"), "ps"),
        (MINIMAL.replace("size: 10Gi}, logs", "size: ten}, logs"), "storage.data.size"),
        (MINIMAL + "workers: {replicas: 2}\n", "workers"),
        (MINIMAL + "env: {TF_CONFIG: x}\n", "env.TF_CONFIG"),
        ("name: [unclosed\n", "spec"),
        ("- a list\n", "spec"),
    ],
)
def test_bad_spec_exits_non_zero_naming_the_field(tmp_path: Path, text: str, field: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = cli("render", str(path))
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.startswith(f"error: {field}: "), out.stderr


def test_bad_namespace_option_names_the_field(spec_file: Path):
    out = cli("render", str(spec_file), "--namespace", "Not Valid")
    assert out.returncode == 1 and out.stderr.startswith("error: namespace: ")


def test_missing_file_and_partial_identity_are_usage_errors(spec_file: Path, tmp_path: Path):
    out = cli("render", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and out.stderr.startswith("error: ")
    out = cli("render", str(spec_file), "--dag-id", "d")
    assert out.returncode == 2 and "--run-id" in out.stderr


def test_installed_console_script_works(spec_file: Path):
    script = Path(sys.executable).with_name("airflow-tfk")
    if not script.exists():
        pytest.skip("console script not installed (run scripts/bootstrap.sh)")
    out = subprocess.run([str(script), "render", str(spec_file)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert len(list(yaml.safe_load_all(out.stdout))) == 7  # with the NetworkPolicy


def test_the_spec_file_is_the_shared_imagenet_spec():
    assert yaml.safe_load(MINIMAL) == {**IMAGENET, "storage": IMAGENET_STORAGE}
