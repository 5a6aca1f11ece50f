"""What a sweep leaves: its study, the table of trials, the best completed trial."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_tfk.sweep import study as studies

if TYPE_CHECKING:
    from airflow_tfk.sweep.config import SweepConfig


@dataclass
class SweepResult:
    """What a sweep leaves: its study, the table of trials, the best completed one."""

    study_name: str
    storage: str
    objective: str
    direction: str
    trials: list[dict[str, Any]]
    best: dict[str, Any] | None
    peak_concurrency: int
    #: The size of the search space when the study came to hold every point of it (the
    #: sweep then stopped short of ``n_trials``); None otherwise.
    search_space_exhausted: int | None = None
    #: The sweep's ``budget_core_hours`` stopped trials from starting.
    budget_reached: bool = False

    def to_xcom(self) -> dict[str, Any]:
        best = self.best or {}
        export = best.get("export") or {}
        return {
            "study_name": self.study_name,
            "storage": self.storage,
            "objective": self.objective,
            "direction": self.direction,
            "trials": self.trials,
            "best": self.best,
            "peak_concurrency": self.peak_concurrency,
            "search_space_exhausted": self.search_space_exhausted,
            # what TFPublishModelOperator reads from an upstream training's XCom
            "export": export or None,
            "metrics": best.get("metrics"),
            "model_name": export.get("model_name"),
            "model_version": export.get("version"),
            "model_path": export.get("path"),
            "usage": {**sweep_usage(self.trials), "budget_reached": self.budget_reached},
        }

    def usage_line(self) -> str:
        """``sweep usage: 0.0412 core-hours over 12 trials (8 pruned: about 0.0310 core-hours
        saved)``."""
        u = sweep_usage(self.trials)
        saved = u["pruning_saved_core_seconds"]
        return (
            f"sweep usage: {u['core_seconds'] / 3600:.4f} core-hours over {u['trials']} trial(s)"
            f" ({u['pruned']} pruned: about {saved / 3600:.4f} core-hours saved against the "
            "completed trials' mean)"
        )


def sweep_usage(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Requested core-seconds per trial and in total, and what pruning saved: for each
    pruned trial, the completed trials' mean less what it held (0 when it held more)."""
    counted = [r for r in rows if isinstance(r.get("core_seconds"), (int, float))]
    completed = [float(r["core_seconds"]) for r in counted if r.get("state") == "COMPLETE"]
    pruned = [float(r["core_seconds"]) for r in counted if r.get("state") == "PRUNED"]
    mean = sum(completed) / len(completed) if completed else 0.0
    return {
        "core_seconds": round(sum(float(r["core_seconds"]) for r in counted), 3),
        "per_trial": {str(r["number"]): r["core_seconds"] for r in counted},
        "trials": len(counted),
        "pruned": len(pruned),
        "pruning_saved_core_seconds": round(sum(max(0.0, mean - p) for p in pruned), 3),
    }


def objective_value(
    name: str, metrics: dict[str, Any] | None, eval_metrics: dict[str, Any] | None
) -> float | None:
    """The objective's finite value, from the app's own metrics first, else from the
    evaluator's; None when neither has it."""
    for source in (metrics, eval_metrics):
        value = (source or {}).get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def params_text(params: dict[str, Any]) -> str:
    """A trial's parameters on one line, for the task log."""
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def study_result(study: Any, config: SweepConfig, study_name: str, storage: str, peak: int) -> SweepResult:
    """The sweep's result as its study records it (trials waiting to run are left out)."""
    import optuna

    best: dict[str, Any] | None = None
    frozen = {t.number: t for t in study.get_trials(deepcopy=False)}
    rows = [studies.trial_row(t) for t in frozen.values() if t.state is not optuna.trial.TrialState.WAITING]
    best_row = studies.best_row(rows, config.direction)
    if best_row is not None:
        attrs = frozen[best_row["number"]].user_attrs
        best = {**best_row, "metrics": attrs.get(studies.METRICS), "export": attrs.get(studies.EXPORT)}
    return SweepResult(study_name, storage, config.objective, config.direction.value, rows, best, peak)
