"""What the local sweep tests share: the stand-in trainer's spec, a sweep's settings, the
operator that runs them, and a look at a finished sweep's study."""

from __future__ import annotations

from pathlib import Path

import optuna
import sqlalchemy.exc

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator
from airflow_tfk.run.policies import Outcome, evaluate
from airflow_tfk.spec.cluster import Mode
from airflow_tfk.sweep import study as studies
from tests.helpers import ROOT

TRAINER = str(Path(__file__).parent / "tasks" / "sweep_trainer.py")


def trainer_spec(tmp_path: Path, steps: int = 30, step_seconds: float = 0.1) -> dict:
    return {
        "image": "local/unused:1",
        "mode": "all_reduce",
        "command": ["python", TRAINER],
        # a request, so each trial's usage counts core-seconds (the sweep totals them)
        "worker": {"replicas": 1, "resources": {"cpu": "500m"}},
        "env": {
            "REPO_DIR": str(ROOT),
            "STEPS": str(steps),
            "STEP_SECONDS": str(step_seconds),
            "EXPORT_AT_STEP": "3",
        },
        "storage": {"models": {"claim": "tfk-models"}},
        "ps_grace_seconds": 0,
    }


def sweep_config(n_trials: int, **extra) -> dict:
    return {
        "n_trials": n_trials,
        "max_concurrent_trials": 2,
        "search_space": {"lr": {"type": "float", "low": 0.0, "high": 1.0}},
        "objective": "score",
        "direction": "maximize",
        "sampler": {"name": "random", "seed": 7},
        "pruner": {"name": "median", "n_startup_trials": 2},
        "poll_interval": 0.2,
        "smoothing": 1.0,
        **extra,
    }


def make_op(tmp_path: Path, n_trials: int, steps: int = 30, **sweep) -> TFHyperparameterSweepOperator:
    return TFHyperparameterSweepOperator(
        task_id="sweep",
        backend="local",
        cluster_spec=trainer_spec(tmp_path, steps=steps),
        sweep=sweep_config(n_trials, **sweep),
    )


def load(result: dict) -> optuna.study.Study:
    return optuna.load_study(study_name=result["study_name"], storage=result["storage"])


def first_done_and_training(root: Path, training: int) -> bool:
    """Has a trial of the (only) study under ``root`` finished while ``training`` others
    still train? Read in that order - the study, then each running trial's cluster - so a
    trial that ends between the reads is not counted as training: a kill after this is
    true finds those trials to interrupt."""
    files = list((root / ".sweeps").glob("*.db"))
    if not files:
        return False
    try:
        trials = optuna.load_study(study_name=None, storage=f"sqlite:///{files[0]}").trials
    except (KeyError, ValueError, sqlalchemy.exc.SQLAlchemyError):  # the file is there, the study not yet
        return False
    if not any(t.state.name in ("COMPLETE", "PRUNED") for t in trials):
        return False
    backend = LocalBackend(str(root))
    names = [t.user_attrs.get(studies.CLUSTER) for t in trials if t.state.name == "RUNNING"]
    statuses = [backend.status(ClusterRef(n, "default")) for n in names if n]
    # Training: every task running (one whose tasks have exited is the loop's to end).
    live = [s for s in statuses if evaluate(Mode.ALL_REDUCE, {"worker": 1}, s).outcome is Outcome.RUNNING]
    return len(live) >= training
