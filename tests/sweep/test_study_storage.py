"""The study's storage between and across tries: a damaged file, a study made for the
other direction, several openers of a new file at once."""

from __future__ import annotations

import threading
from pathlib import Path

import optuna
import pytest

from airflow_tfk.backends.local import LocalBackend
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.config import SweepConfig
from tests.helpers import task_context
from tests.sweep.sweep_helpers import make_op, sweep_config

STUDY = "dag.sweep.manual__storage.-1"


def study_file(root: Path) -> Path:
    path = root / ".sweeps" / f"{STUDY}.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize(
    "content",
    [b"not a database at all\n" * 50, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["text", "torn"],
)
def test_a_damaged_study_file_is_an_error_naming_it_and_nothing_starts(local_root, tmp_path, content) -> None:
    path = study_file(local_root)
    path.write_bytes(content)
    with pytest.raises(studies.StudyStorageError) as caught:
        make_op(tmp_path, n_trials=2).execute(task_context(run_id="manual__storage", task_id="sweep"))
    message = str(caught.value)
    assert str(path) in message and "move it aside" in message, message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert LocalBackend(str(local_root)).find(None, {}) == []


def test_a_study_made_for_the_other_direction_is_refused(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(storage=url, study_name="s", direction="minimize")
    config = SweepConfig.from_dict(sweep_config(2))  # maximize
    with pytest.raises(studies.StudyStorageError, match="made to minimize .* to maximize"):
        studies.open_study(config, url, "s")


def test_several_openers_of_a_new_study_file_at_once_all_get_the_study(tmp_path) -> None:
    """Two sweeps given the same storage, or a sweep and a reader, create the new file's
    tables at the same moment; neither may fail for it."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    config = SweepConfig.from_dict(sweep_config(2))
    start = threading.Barrier(6)
    opened: list[int] = []
    errors: list[BaseException] = []

    def open_it() -> None:
        start.wait()
        try:
            opened.append(studies.open_study(config, url, "shared")._study_id)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(set(opened)) == 1, errors
