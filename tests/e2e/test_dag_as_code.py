"""DAG-as-code end to end, with the real Airflow CLI on the local backend.

A trainings folder holds the repository's example files plus a broken one:
- ``airflow dags reserialize`` (the DAG processor's parse-and-store path) stores the broken
  file's error under the YAML file's own path, naming the field, while the generated DAGs
  are stored active (an error under the DAG file's path would have marked them stale);
- ``airflow dags test digits_manual`` runs the generated DAG: a real distributed training
  (chief + PS + worker, sized from the trigger form's Params) and the publish step.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
AIRFLOW = str(Path(sys.executable).parent / "airflow")

DB_STATE = """
import json
from sqlalchemy import select
from airflow.models.dag import DagModel
from airflow.models.errors import ParseImportError
from airflow.utils.session import create_session
with create_session() as s:
    dags = {d.dag_id: d.is_stale for d in s.scalars(select(DagModel).where(DagModel.dag_id.like("digits_%")))}
    errors = {e.filename: e.stacktrace for e in s.scalars(select(ParseImportError))}
print(json.dumps({"dags": dags, "errors": errors}))
"""


@pytest.fixture
def trainings(tmp_path: Path) -> Path:
    folder = tmp_path / "trainings"
    shutil.copytree(ROOT / "trainings", folder)
    (folder / "broken.yaml").write_text(
        "schedule: '@daily'\ncluster:\n  image: i\n  mode: all_reduce\n  command: [a]\n"
        "  worker: {replicas: 2}\n  ps: {replicas: 1}\n"
    )
    return folder


def test_generated_dags_are_stored_active_and_the_broken_file_is_its_own_import_error(
    airflow_env, trainings: Path
) -> None:
    env = {**airflow_env.env, "TFK_TRAININGS_DIR": str(trainings)}
    run = subprocess.run(
        [AIRFLOW, "dags", "reserialize"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    state = subprocess.run(
        [sys.executable, "-c", DB_STATE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert state.returncode == 0, state.stderr[-4000:]
    db = json.loads(state.stdout.strip().splitlines()[-1])
    assert db["dags"] == {"digits_manual": False, "digits_nightly": False}
    broken = str(trainings / "broken.yaml")
    assert db["errors"][broken] == (
        f"{broken}:7: cluster.ps: must be omitted when mode is all_reduce (there are no parameter servers)"
    )
    assert not any(name.endswith("tfk_trainings.py") for name in db["errors"])


def test_airflow_dags_test_of_a_generated_dag(airflow_env, trainings: Path) -> None:
    from airflow_tfk.serving.local import LocalServing
    from airflow_tfk.serving.spec import ServingSpec

    run = airflow_env.dags_test(
        "digits_manual",
        conf=json.dumps({"steps": 60, "workers": 1}),
        timeout=900,
        extra_env={"TFK_TRAININGS_DIR": str(trainings)},
    )
    out = run.stdout + run.stderr
    try:
        assert run.returncode == 0, out[-6000:]
        assert "state=success" in out
        # sized from the form: 1 worker, not the file's default of 2
        assert "chief x1, ps x1, worker x1, mode parameter_server" in out, out[-6000:]
        assert "training succeeded" in out
        assert re.search(r"smoke (\w+ )?predict of version \d+ answered", out), out[-4000:]
        assert re.search(r"digits version \d+ is serving", out), out[-4000:]
    finally:
        LocalServing(
            ServingSpec(model_name="digits", claim="tfk-models"), str(airflow_env.local_root)
        ).delete(print)
