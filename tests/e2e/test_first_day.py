"""A newcomer's first day, as the getting-started page tells it: write a training app and a DAG in a
folder of your own, run them with the one documented command, find the model.

The files and the command are read from docs/getting-started.md itself (its "Your first training"
section), so the page cannot drift from what works. Real TensorFlow, real
`airflow dags test`, the local backend; everything lives in a temporary folder.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_commands import section

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def first_day_section() -> str:
    return section(ROOT / "docs" / "getting-started.md", "## Your first training, in your own folder")


def files_and_command(section: str) -> tuple[dict[str, str], list[str]]:
    files = {}
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.S):
        first = block.splitlines()[0]
        m = re.match(r"^# (my_project/\S+)$", first)
        assert m, f"a python block of the section does not start with its file name: {first!r}"
        files[m.group(1)] = block
    commands = [
        line
        for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)
        for line in block.splitlines()
        if "airflow-tfk airflow" in line
    ]
    assert len(commands) == 1, commands
    return files, shlex.split(commands[0])


def test_the_readmes_first_training_runs_as_written(tmp_path: Path):
    files, argv = files_and_command(first_day_section())
    assert set(files) == {"my_project/sums_app.py", "my_project/dags/my_first_training.py"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert argv[0] == "/path/to/airflow-tfk/.venv/bin/airflow-tfk"
    argv[0] = str(BIN / "airflow-tfk")  # the README's placeholder for the checkout

    project = tmp_path / "my_project"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TFK_")) and k != "DAGS_FOLDER"
    }
    # Not the developer's own .airflow-home/.tfk-local: the command keeps what is exported.
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow-home")
    env["TFK_LOCAL_ROOT"] = str(tmp_path / "tfk-local")
    run = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, timeout=840)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]

    # It said where things go ...
    assert f"DAGs folder:   {project / 'dags'}" in run.stderr
    assert f"local backend: {tmp_path / 'tfk-local'}/<namespace>/<cluster>/" in run.stderr
    # ... the local backend said what it did with the image, python and the relative path ...
    assert "ignoring image registry.example.com/sums:1" in out
    assert f"with {sys.executable}" in out
    assert f"working directory {project} " in out
    # ... the training succeeded and the model is where the README says.
    assert "training succeeded" in out
    versions = list(
        (tmp_path / "tfk-local" / "default" / ".claims" / "my-models" / "sums").glob("*/saved_model.pb")
    )
    assert versions, out[-4000:]
