"""The judge's writes to a real SQLite study: how many commits a finished trial's curve
costs (each commit holds the file's write lock that the judge's reads wait behind)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy

from airflow_tfk.protocol.progress import progress_line
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.config import SweepConfig
from airflow_tfk.sweep.judge import Judging, _pruner_says, _Trial


class Judge(Judging):
    """The judge's half alone, reading its trial's log from a string."""

    def __init__(self, config: SweepConfig, log_text: str) -> None:
        self.config = config
        self._sign = 1.0
        self.emit = print
        self.text = log_text

    def _logs(self, run: _Trial, lines: int) -> str:
        return self.text


def config() -> SweepConfig:
    return SweepConfig.from_dict(
        {
            "n_trials": 4,
            "search_space": {"lr": {"type": "float", "low": 0.0, "high": 1.0}},
            "objective": "score",
            "pruner": {"name": "median", "n_startup_trials": 1, "interval_steps": 1},
            "smoothing": 1.0,
        }
    )


def curve_text(steps: int, gap: float) -> str:
    start = time.time()
    return "\n".join(progress_line(s, steps, gap + 1.0 / s, start) for s in range(1, steps + 1))


def commits_of(study) -> list[int]:
    counted: list[int] = []
    sqlalchemy.event.listen(study._storage._backend.engine, "commit", lambda conn: counted.append(1))
    return counted


@pytest.mark.parametrize("steps", [100, 1000])
def test_a_finished_trials_curve_is_one_commit_and_the_pruner_reads_it(tmp_path: Path, steps: int) -> None:
    cfg = config()
    study = studies.open_study(cfg, f"sqlite:///{tmp_path / 's.db'}", "s")
    dists = studies.distributions(cfg)
    done = study.ask(dists)
    judge = Judge(cfg, curve_text(steps, gap=0.0))
    run = _Trial(done, None, "worker", 0, judge._curve())  # type: ignore[arg-type]
    commits = commits_of(study)
    judge._report_curve(run)
    assert len(commits) == 1, f"{len(commits)} commits for one curve of {steps} points"
    study.tell(done, 0.0)
    stored = study.trials[done.number].intermediate_values
    assert sorted(stored) == list(range(1, steps + 1))
    assert stored[steps] == pytest.approx(1.0 / steps)
    # What the judge then decides on: a running trial behind it at a step is pruned, one
    # ahead is not.
    assert _pruner_says(study, {10: 0.5 + 1.0 / 10})
    assert not _pruner_says(study, {10: 1.0 / 10 - 0.01})


def test_points_the_judge_wrote_while_the_trial_ran_are_not_written_again(tmp_path: Path) -> None:
    cfg = config()
    study = studies.open_study(cfg, f"sqlite:///{tmp_path / 's.db'}", "s")
    trial = study.ask(studies.distributions(cfg))
    judge = Judge(cfg, curve_text(50, gap=0.1))
    run = _Trial(trial, None, "worker", 0, judge._curve())  # type: ignore[arg-type]
    trial.report(123.0, 10)  # as the judge reports a running trial's newest point
    run.reported[10] = 123.0
    judge._report_curve(run)
    values = study.trials[trial.number].intermediate_values
    assert values[10] == 123.0 and len(values) == 50
    assert run.reported.keys() == values.keys()
