"""One of two processes racing to claim the same studies (tests/sweep/test_study_owner.py).

argv: storage URL, run id, the directory both processes meet in, rounds (the studies
``race-<round>`` exist already). Each round both
claim the study ``race-<round>`` at the same instant (a time both read from the ``go``
file); one JSON line per round says whether this process won or who refused it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import optuna

from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.sweep.owner import StudyInUse, StudyOwnership, SweepOwner


def main() -> None:
    url, run_id, meet, rounds = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    opened = [optuna.load_study(study_name=f"race-{i}", storage=url) for i in range(rounds)]
    me = SweepOwner.of(RunIdentity("dag", "sweep", run_id), 1)
    (meet / f"ready-{run_id}").touch()
    while not (meet / "go").exists():
        time.sleep(0.01)
    start, spacing = json.loads((meet / "go").read_text())
    for i, study in enumerate(opened):
        time.sleep(max(0.0, start + i * spacing - time.time()))
        try:
            StudyOwnership(study, me, f"race-{i}", url).claim()
            print(json.dumps({"round": i, "won": True}), flush=True)
        except StudyInUse as exc:
            print(json.dumps({"round": i, "won": False, "error": str(exc)}), flush=True)


if __name__ == "__main__":
    main()
