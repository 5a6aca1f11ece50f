"""`airflow-tfk validate`: offline, the same messages as the DAG file, tested exit codes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def validate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_tfk.cli.main", "validate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


@pytest.fixture
def validate_here(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """The console script's own ``main`` in this process, which has Airflow imported already:
    a new interpreter pays ~2.5 s importing Airflow to build the DAGs. The real
    ``python -m airflow_tfk.cli.main`` runs in test_invalid_files_exit_1_with_the_dag_files_messages
    and test_usage_errors_exit_2."""
    from airflow_tfk.cli.main import main

    def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main(["validate", *args])
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)

    return run


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(ROOT / "trainings", root / "trainings")
    bad = root / "bad"
    bad.mkdir()
    (bad / "replicas.yaml").write_text(
        "cluster:\n  image: i\n  mode: all_reduce\n  command: [a]\n  worker: {replicas: 0}\n"
    )
    (bad / "cron.yml").write_text(
        "schedule: '0 25 * * *'\ncluster: {image: i, mode: all_reduce, command: [a], worker: {}}\n"
    )
    (bad / "notes.txt").write_text("not a training file")
    return root


def test_valid_folder_exits_0(repo: Path, validate_here) -> None:
    out = validate_here("trainings", cwd=repo)
    assert out.returncode == 0, out.stderr
    assert (
        "ok: trainings/digits_nightly.yaml: dag digits_nightly (0 3 * * *; tasks tensorboard, train, publish)"
        in (out.stdout)
    )
    assert out.stdout.strip().endswith("2 valid, 0 invalid training file(s)")
    assert out.stderr == ""


def test_invalid_files_exit_1_with_the_dag_files_messages(repo: Path) -> None:
    from airflow_tfk.dagfactory.loader import load_folder, training_files

    out = validate("trainings", "bad", cwd=repo)
    assert out.returncode == 1
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: bad/cron.yml:1: schedule: is not a valid cron expression: [0 25 * * *] is not acceptable, "
        "out of range; write 5 fields (minute hour day-of-month month day-of-week, e.g. '0 3 * * *'), "
        "or a preset: @once, @continuous, @hourly, @daily, @weekly, @monthly, @quarterly, @yearly",
        "error: bad/replicas.yaml:5: cluster.worker.replicas: must be between 1 and 10000 (got 0)",
    ]
    assert out.stderr.strip().endswith("2 valid, 2 invalid training file(s)")
    # exactly what the DAG file reports to Airflow for the same files
    in_process = load_folder(repo / "bad", files=training_files(repo / "bad"))
    assert [e.describe(str(e.path.relative_to(repo))) for e in in_process.errors] == [e[7:] for e in errors]


def test_quiet_prints_only_errors(repo: Path, validate_here) -> None:
    out = validate_here("-q", "bad/replicas.yaml", cwd=repo)
    assert out.returncode == 1 and out.stdout == ""
    assert "cluster.worker.replicas" in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing"], "error: missing: no such file or directory"),
        (["bad/notes.txt"], "error: bad/notes.txt: not a training file (*.yaml, *.yml)"),
        (["empty"], "error: no training files (*.yaml, *.yml) in empty"),
    ],
)
def test_usage_errors_exit_2(repo: Path, args: list[str], message: str) -> None:
    (repo / "empty").mkdir(exist_ok=True)
    out = validate(*args, cwd=repo)
    assert out.returncode == 2 and out.stderr.strip() == message


def test_a_publish_name_the_training_does_not_export_is_an_error(tmp_path: Path, validate_here) -> None:
    (tmp_path / "digits.yaml").write_text(
        "cluster:\n"
        "  image: i\n"
        "  mode: all_reduce\n"
        "  command: [python, -m, airflow_tfk.runtime.examples.digits_app]\n"
        "  args: [--tfk_steps, '100', --tfk_model_name, digits_v2]\n"
        "  worker: {replicas: 2}\n"
        "  storage: {models: {claim: tfk-models}}\n"
        "publish: {model_name: digits}\n"
    )
    out = validate_here("digits.yaml", cwd=tmp_path)
    assert out.returncode == 1, out
    assert out.stderr.startswith(
        "error: digits.yaml:8: publish.model_name: is 'digits', but cluster.args gives "
        "--tfk_model_name 'digits_v2'"
    ), out.stderr


def test_every_error_of_every_block_at_once_each_with_its_line(tmp_path: Path, validate_here) -> None:
    """A cluster error and several in the sweep block: all printed in one pass, each with
    its field and line, in one wording (``error: <file>:<line>: <field>: <rule>``)."""
    (tmp_path / "trainings").mkdir()
    (tmp_path / "trainings" / "t.yaml").write_text(
        "cluster:\n"
        "  image: registry.example/t:1\n"
        "  mode: all_reduce\n"
        "  command: [python, t.py]\n"
        "  worker:\n"
        "    replicas: 0\n"
        "sweep:\n"
        "  n_trials: 0\n"
        "  search_space:\n"
        "    lr: {type: float, low: 1, high: 0}\n"
        "    tfk_model_name: {type: categorical, choices: [a]}\n"
        "  poll_interval: -3\n"
    )
    out = validate_here("trainings", cwd=tmp_path)
    assert out.returncode == 1
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    fields = {line.split(": ")[2]: line.split(": ")[1] for line in errors}
    assert fields == {
        "cluster.worker.replicas": "trainings/t.yaml:6",
        "sweep.n_trials": "trainings/t.yaml:8",
        "sweep.search_space.lr.high": "trainings/t.yaml:10",
        "sweep.search_space.tfk_model_name": "trainings/t.yaml:11",
        "sweep.poll_interval": "trainings/t.yaml:12",
    }, errors
