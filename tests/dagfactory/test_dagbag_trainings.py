"""The real Airflow DagBag and DAG-processor parse over a repository holding valid training
files and broken ones: each broken file is an import error of that YAML file naming the
field (and line); the valid trainings are DAGs with the right schedule, tasks and params.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

BROKEN_REPLICAS = (
    (ROOT / "trainings" / "digits_nightly.yaml")
    .read_text()
    .replace("worker: {replicas: 2,", "worker: {replicas: -1,")
)
BROKEN_DUPLICATE = "schedule: '@daily'\ncluster: {image: a}\nschedule: '@hourly'\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository laid out like this one: dags/tfk_trainings.py beside trainings/."""
    monkeypatch.delenv("TFK_TRAININGS_DIR", raising=False)
    (tmp_path / "dags").mkdir()
    shutil.copy(ROOT / "dags" / "tfk_trainings.py", tmp_path / "dags")
    trainings = tmp_path / "trainings"
    shutil.copytree(ROOT / "trainings", trainings)
    assert BROKEN_REPLICAS != (ROOT / "trainings" / "digits_nightly.yaml").read_text()
    (trainings / "team-b").mkdir()
    (trainings / "team-b" / "broken_replicas.yaml").write_text(BROKEN_REPLICAS)
    (trainings / "broken_duplicate.yml").write_text(BROKEN_DUPLICATE)
    return tmp_path


def _check_valid_dags(dags: dict) -> None:
    nightly = dags["digits_nightly"]
    assert nightly.timetable.expression == "0 3 * * *"
    assert {t.task_id for t in nightly.tasks} == {"tensorboard", "train", "publish"}
    train = nightly.get_task("train")
    assert nightly.get_task("publish").upstream_task_ids == {"train"}
    assert train.previous_run_policy == "kill_previous"
    assert train.execution_timeout == timedelta(minutes=60)
    assert train.cluster_spec["max_duration_seconds"] == 3600
    assert train.retries == 1 and train.owner == "ml-platform"
    assert nightly.params["steps"] == 2000
    assert nightly.max_active_runs == 2  # the next run must start to apply kill_previous
    assert {"airflow-tfk", "digits", "nightly"} <= set(nightly.tags)

    manual = dags["digits_manual"]
    assert manual.schedule is None and type(manual.timetable).__name__ == "NullTimetable"
    assert {t.task_id for t in manual.tasks} == {"train", "publish"}
    assert manual.params["workers"] == 2
    assert manual.get_task("train").cluster_spec["worker"]["replicas"] == "{{ params.workers }}"


def test_dagbag_reports_each_broken_file_and_loads_the_rest(repo: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(repo / "dags"))
    replicas = str(repo / "trainings" / "team-b" / "broken_replicas.yaml")
    duplicate = str(repo / "trainings" / "broken_duplicate.yml")
    assert set(bag.import_errors) == {replicas, duplicate}
    assert bag.import_errors[replicas] == (
        f"{replicas}:21: cluster.worker.replicas: must be between 1 and 10000 (got -1)"
    )
    assert bag.import_errors[duplicate] == (
        f"{duplicate}:3: schedule: is defined twice (lines 1 and 3); remove one"
    )
    assert set(bag.dag_ids) == {"digits_nightly", "digits_manual"}
    _check_valid_dags(bag.dags)


def test_dag_processor_attributes_errors_to_the_yaml_files(repo: Path) -> None:
    """What the DAG processor sends to the database: errors keyed by the training files'
    paths in the bundle, not by the DAG file (which would mark its valid DAGs stale)."""
    import structlog
    from airflow.dag_processing.processor import DagFileParseRequest, _parse_file

    result = _parse_file(
        DagFileParseRequest(
            file=str(repo / "dags" / "tfk_trainings.py"), bundle_path=repo, bundle_name="repo"
        ),
        structlog.get_logger(),
    )
    assert result is not None
    assert set(result.import_errors) == {
        "trainings/team-b/broken_replicas.yaml",
        "trainings/broken_duplicate.yml",
    }
    assert result.import_errors["trainings/team-b/broken_replicas.yaml"].startswith(
        "trainings/team-b/broken_replicas.yaml:21: cluster.worker.replicas:"
    )
    assert "dags/tfk_trainings.py" not in result.import_errors
    assert sorted(d.dag_id for d in result.serialized_dags) == ["digits_manual", "digits_nightly"]


def test_fixing_the_file_loads_its_dag(repo: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    (repo / "trainings" / "team-b" / "broken_replicas.yaml").write_text(
        BROKEN_REPLICAS.replace("replicas: -1,", "replicas: 3,").replace(
            "description:", "dag_id: digits_team_b\ndescription:"
        )
    )
    (repo / "trainings" / "broken_duplicate.yml").unlink()
    bag = DagBag(dag_folder=str(repo / "dags"))
    assert bag.import_errors == {}
    assert set(bag.dag_ids) == {"digits_nightly", "digits_manual", "digits_team_b"}


def test_same_dag_id_in_two_files_is_an_error_of_the_second(repo: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    copy = repo / "trainings" / "zz_copy.yaml"
    copy.write_text("dag_id: digits_nightly\n" + (repo / "trainings" / "digits_manual.yaml").read_text())
    bag = DagBag(dag_folder=str(repo / "dags"))
    assert bag.import_errors[str(copy)] == (
        f"{copy}:1: dag_id: is already used by {repo / 'trainings' / 'digits_nightly.yaml'} "
        "(got 'digits_nightly')"
    )
    assert bag.dags["digits_nightly"].timetable.expression == "0 3 * * *"


def test_configured_folder_that_does_not_exist_is_an_error_of_the_dag_file(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.setenv("TFK_TRAININGS_DIR", "../nowhere")
    bag = DagBag(dag_folder=str(repo / "dags"))
    assert bag.dag_ids == []
    [(path, message)] = bag.import_errors.items()
    assert path.endswith("tfk_trainings.py") and "TFK_TRAININGS_DIR=../nowhere" in message


def test_a_dag_file_may_name_its_own_folder(repo: Path) -> None:
    """Several loader files, each with its folder, split a large set of trainings."""
    from airflow.dag_processing.dagbag import DagBag

    (repo / "dags" / "team_b.py").write_text(
        "# airflow DAG file\nfrom airflow_tfk.dagfactory.loader import load_into\n"
        "load_into(globals(), __file__, folder='../trainings/team-b')\n"
    )
    (repo / "dags" / "tfk_trainings.py").unlink()
    bag = DagBag(dag_folder=str(repo / "dags"))
    assert bag.dag_ids == []
    assert list(bag.import_errors) == [str(repo / "trainings" / "team-b" / "broken_replicas.yaml")]
