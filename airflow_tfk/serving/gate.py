"""The quality gate ("blessing", as TFX's Evaluator calls it): a candidate's metrics must
pass absolute thresholds and must not regress beyond a tolerance against the metrics
recorded for the version that serves now. Pure: no I/O, no Airflow.

    gate = QualityGate.from_dict({
        "thresholds": {"accuracy": 0.9, "loss": 0.5},
        "lower_is_better": ["loss"],
        "max_regression": {"accuracy": 0.01},   # or one number for every threshold metric
        "on_failure": "skip",                   # or "fail" (the default)
    })
    verdict = gate.evaluate({"accuracy": 0.93, "loss": 0.2}, baseline={"accuracy": 0.95}, baseline_version=3)
    verdict.blessed, verdict.failures   # False, ["accuracy 0.93 regressed by 0.02 ... (tolerance 0.01)"]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.errors import SpecError

ON_FAILURE = ("fail", "skip")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(where, "must be a finite number", value)
    return float(value)


@dataclass(frozen=True)
class GateVerdict:
    blessed: bool
    failures: tuple[str, ...]
    checks: tuple[str, ...]  # every comparison made, passed or not, for the task log
    metrics: Mapping[str, Any]

    def summary(self) -> str:
        return "; ".join(self.failures) if self.failures else "; ".join(self.checks) or "no checks"


@dataclass(frozen=True)
class QualityGate:
    """:param thresholds: metric -> bound: ``metric >= bound`` (``<=`` for the metrics in
        ``lower_is_better``). Every metric named here must be in the candidate's metrics.
    :param lower_is_better: metrics for which smaller is better (loss, error rates).
    :param max_regression: how much worse than the serving version's recorded value a
        metric may be: one number for every metric in ``thresholds``, or metric ->
        tolerance. None: no comparison. Without recorded metrics for the serving version
        (the first publish, or one before the gate existed) there is nothing to compare.
    :param on_failure: ``fail`` (the task fails) or ``skip`` (the task is skipped); either
        way nothing is published.
    """

    thresholds: Mapping[str, float] = field(default_factory=dict)
    lower_is_better: tuple[str, ...] = ()
    max_regression: float | Mapping[str, float] | None = None
    on_failure: str = "fail"

    def __post_init__(self) -> None:
        if not isinstance(self.thresholds, Mapping):
            raise SpecError("quality_gate.thresholds", "must be a mapping metric -> bound", self.thresholds)
        bounds = {str(k): _number(v, f"quality_gate.thresholds.{k}") for k, v in self.thresholds.items()}
        object.__setattr__(self, "thresholds", bounds)
        lower = self.lower_is_better
        if isinstance(lower, str) or not isinstance(lower, Sequence | tuple | list):
            raise SpecError("quality_gate.lower_is_better", "must be a list of metric names", lower)
        object.__setattr__(self, "lower_is_better", tuple(str(x) for x in lower))
        tol = self.max_regression
        if isinstance(tol, Mapping):
            tol = {str(k): _number(v, f"quality_gate.max_regression.{k}") for k, v in tol.items()}
            bad = [k for k, v in tol.items() if v < 0]
        elif tol is not None:
            tol = _number(tol, "quality_gate.max_regression")
            bad = [""] if tol < 0 else []
        else:
            bad = []
        if bad:
            where = ".".join(x for x in ("quality_gate.max_regression", bad[0]) if x)
            raise SpecError(where, "must be >= 0", self.max_regression)
        object.__setattr__(self, "max_regression", tol)
        if self.on_failure not in ON_FAILURE:
            raise SpecError("quality_gate.on_failure", "must be 'fail' or 'skip'", self.on_failure)
        if not bounds and tol is None:
            raise SpecError("quality_gate", "needs thresholds or max_regression (it would bless anything)")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QualityGate:
        if not isinstance(data, Mapping):
            raise SpecError("quality_gate", "must be a mapping", data)
        unknown = sorted(set(data) - {"thresholds", "lower_is_better", "max_regression", "on_failure"})
        if unknown:
            raise SpecError(f"quality_gate.{unknown[0]}", "is not a quality gate option")
        return cls(**dict(data))

    def _tolerances(self) -> dict[str, float]:
        if self.max_regression is None:
            return {}
        if isinstance(self.max_regression, Mapping):
            return dict(self.max_regression)
        return dict.fromkeys(self.thresholds, float(self.max_regression))

    def evaluate(
        self,
        metrics: Mapping[str, Any] | None,
        baseline: Mapping[str, Any] | None = None,
        baseline_version: int | None = None,
    ) -> GateVerdict:
        """Whether ``metrics`` are blessed; each failure names the metric and the margin."""
        metrics = dict(metrics or {})
        failures: list[str] = []
        checks: list[str] = []
        self._thresholds(metrics, failures, checks)
        if self._tolerances() and baseline:
            self._regressions(metrics, baseline, baseline_version, failures, checks)
        elif self._tolerances():
            checks.append("no recorded metrics of a serving version: nothing to compare against")
        return GateVerdict(not failures, tuple(failures), tuple(checks), metrics)

    def _thresholds(self, metrics: Mapping[str, Any], failures: list[str], checks: list[str]) -> None:
        for name, bound in sorted(self.thresholds.items()):
            got = _value(metrics, name)
            lower = name in self.lower_is_better
            op = "<=" if lower else ">="
            if got is None:
                failures.append(
                    f"{name}: missing or not a number in the candidate's metrics "
                    f"(has {sorted(metrics) or 'none'}); needs {op} {bound:g}"
                )
                continue
            short = (got - bound) if lower else (bound - got)
            if short > 0:
                failures.append(f"{name} {got:g} fails the threshold {op} {bound:g} (by {short:.4g})")
            else:
                checks.append(f"{name} {got:g} {op} {bound:g}")

    def _regressions(
        self,
        metrics: Mapping[str, Any],
        baseline: Mapping[str, Any],
        version: int | None,
        failures: list[str],
        checks: list[str],
    ) -> None:
        for name, tol in sorted(self._tolerances().items()):
            got, base = _value(metrics, name), _value(baseline, name)
            if base is None:
                checks.append(f"{name}: no recorded value for version {version} to compare")
            elif got is None:
                if name not in self.thresholds:  # already reported there
                    failures.append(
                        f"{name}: missing in the candidate's metrics (version {version} recorded {base:g})"
                    )
            else:
                worse = (got - base) if name in self.lower_is_better else (base - got)
                if worse > tol:
                    failures.append(
                        f"{name} {got:g} regressed by {worse:.4g} against {base:g} of serving "
                        f"version {version} (tolerance {tol:g})"
                    )
                else:
                    checks.append(f"{name} {got:g} vs {base:g} of version {version} (tolerance {tol:g})")


def _value(source: Mapping[str, Any], name: str) -> float | None:
    v = source.get(name)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)
