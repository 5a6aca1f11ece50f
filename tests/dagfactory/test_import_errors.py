"""Outside an Airflow importer, a broken training file is a warning on its own path and
line (and a log line), never an exception that would hide the valid trainings."""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path

import pytest

from airflow_tfk.dagfactory.import_errors import TrainingFileWarning

ROOT = Path(__file__).resolve().parents[2]


def test_runpy_of_the_dag_file_warns_per_broken_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainings = tmp_path / "trainings"
    shutil.copytree(ROOT / "trainings", trainings)
    (trainings / "bad.yaml").write_text("cluster:\n  image: i\n  command: [a]\n  worker: {replicas: x}\n")
    monkeypatch.setenv("TFK_TRAININGS_DIR", str(trainings))
    import airflow.sdk  # noqa: F401  (Airflow routes warnings to logging when first imported)

    with pytest.warns(TrainingFileWarning) as record:
        namespace = runpy.run_path(str(ROOT / "dags" / "tfk_trainings.py"))
    [warning] = [w for w in record if issubclass(w.category, TrainingFileWarning)]
    assert (warning.filename, warning.lineno) == (str(trainings / "bad.yaml"), 4)
    assert "cluster.worker.replicas: must be an integer (got 'x')" in str(warning.message)
    dags = {v.dag_id for k, v in namespace.items() if k.startswith("dag__")}
    assert dags == {"digits_nightly", "digits_manual"}
