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

from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.printable import printable

ON_FAILURE = ("fail", "skip")
OPTIONS = ("thresholds", "lower_is_better", "max_regression", "on_failure", "evaluate")
#: metric names are short words (``accuracy``, ``val_loss``); a longer "name" is a mistake
MAX_NAME = 200
#: more metrics than a gate could mean; also keeps a hostile mapping's cost small
MAX_METRICS = 256


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpecError(where, "must be a finite number", value)
    try:
        number = float(value)  # an int of 400 digits overflows here
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise SpecError(where, "must be a finite number", value)
    return number


def _name(key: Any, where: str) -> str:
    # str(key) would merge 1 and "1", or turn None into a metric called "None"
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_NAME:
        raise SpecError(
            where, f"metric names must be non-empty strings of at most {MAX_NAME} characters", key
        )
    return key


def _metric_map(value: Any, where: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise SpecError(where, "must be a mapping metric -> number", value)
    if len(value) > MAX_METRICS:
        raise SpecError(where, f"must name at most {MAX_METRICS} metrics", len(value))
    out: dict[str, float] = {}
    for key, number in value.items():
        name = _name(key, where)
        out[name] = _number(number, f"{where}.{name}")
    return out


def _names(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise SpecError(where, "must be a list of metric names", value)
    if len(value) > MAX_METRICS:
        raise SpecError(where, f"must name at most {MAX_METRICS} metrics", len(value))
    return tuple(_name(x, where) for x in value)


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
        tolerance. None: no comparison. When no version serves (the first publish) there
        is nothing to regress against; when one serves without a recorded value for a
        bounded metric, the bound cannot be checked and the gate refuses the candidate.
    :param on_failure: ``fail`` (the task fails) or ``skip`` (the task is skipped); either
        way nothing is published.
    :param evaluate: measure the metrics instead of taking the training's word: the data
        set and metrics (:class:`~airflow_tfk.serving.evaluation.Evaluation`); the bounds
        then judge the candidate's measured metrics, and the regression bound the serving
        version's measured on the same rows.
    """

    thresholds: Mapping[str, float] = field(default_factory=dict)
    lower_is_better: tuple[str, ...] = ()
    max_regression: float | Mapping[str, float] | None = None
    on_failure: str = "fail"
    evaluation: Any = None  # an Evaluation (the option ``evaluate``, a mapping)

    def __post_init__(self) -> None:
        if self.evaluation is not None:
            from airflow_tfk.serving.evaluation import Evaluation

            if not isinstance(self.evaluation, Evaluation):
                object.__setattr__(self, "evaluation", Evaluation.from_dict(self.evaluation))
        bounds = _metric_map(self.thresholds, "quality_gate.thresholds")
        object.__setattr__(self, "thresholds", bounds)
        lower = _names(self.lower_is_better, "quality_gate.lower_is_better")
        object.__setattr__(self, "lower_is_better", lower)
        tol = self._checked_tolerance(bounds)
        object.__setattr__(self, "max_regression", tol)
        if not isinstance(self.on_failure, str) or self.on_failure not in ON_FAILURE:
            raise SpecError("quality_gate.on_failure", "must be 'fail' or 'skip'", self.on_failure)
        if not bounds and tol is None:
            raise SpecError(
                "quality_gate",
                "needs thresholds or max_regression (a gate that checks nothing would bless anything)",
            )
        checked = set(bounds) | set(self._tolerances())
        for name in lower:
            if name not in checked:
                raise SpecError(
                    "quality_gate.lower_is_better",
                    "names a metric that no threshold or max_regression checks",
                    name,
                )

    def _checked_tolerance(self, bounds: Mapping[str, float]) -> float | dict[str, float] | None:
        tol = self.max_regression
        where = "quality_gate.max_regression"
        if tol is None:
            return None
        if isinstance(tol, Mapping):
            per_metric = _metric_map(tol, where)
            if not per_metric:
                raise SpecError(where, "names no metric: the gate would compare nothing", tol)
            for name, value in per_metric.items():
                if value < 0:
                    raise SpecError(f"{where}.{name}", "must be >= 0", value)
            return per_metric
        one = _number(tol, where)
        if one < 0:
            raise SpecError(where, "must be >= 0", tol)
        if not bounds:
            # one number applies to the metrics in thresholds: with none, it compares nothing
            raise SpecError(
                where,
                "one number applies to the metrics in thresholds, and there are none: "
                "name the metrics, e.g. {accuracy: 0.01}",
                tol,
            )
        return one

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QualityGate:
        if not isinstance(data, Mapping):
            raise SpecError("quality_gate", "must be a mapping", data)
        for key in data:
            if not isinstance(key, str) or key not in OPTIONS:
                where = (
                    f"quality_gate.{key}" if isinstance(key, str) and len(key) <= MAX_NAME else "quality_gate"
                )
                raise SpecError(where, f"is not a quality gate option (options: {', '.join(OPTIONS)})", key)
        options = dict(data)
        if "evaluate" in options:
            options["evaluation"] = options.pop("evaluate")
        return cls(**options)

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
        """Whether ``metrics`` are blessed; each failure names the metric and the margin.

        ``baseline_version`` None means no version serves: a regression bound then has
        nothing to regress against (the first publish). When a version serves, every
        bounded metric must have a recorded value to compare with; a bound that cannot be
        checked is a failure, never a pass.
        """
        failures: list[str] = []
        checks: list[str] = []
        if metrics is not None and not isinstance(metrics, Mapping):
            failures.append(
                f"the candidate's metrics are not a mapping metric -> value (got {type(metrics).__name__})"
            )
            metrics = None
        metrics = dict(metrics or {})
        self._thresholds(metrics, failures, checks)
        if self._tolerances():
            if baseline_version is None:
                checks.append("no version serves: nothing to regress against")
            else:
                recorded = baseline if isinstance(baseline, Mapping) else {}
                self._regressions(metrics, recorded, baseline_version, failures, checks)
        if not failures and not checks:
            failures.append("the gate made no comparison")  # unreachable by construction; never a pass
        return GateVerdict(not failures, tuple(failures), tuple(checks), metrics)

    def _thresholds(self, metrics: Mapping[str, Any], failures: list[str], checks: list[str]) -> None:
        for name, bound in sorted(self.thresholds.items()):
            got = _value(metrics, name)
            lower = name in self.lower_is_better
            op = "<=" if lower else ">="
            if got is None:
                failures.append(
                    f"{name}: missing or not a number in the candidate's metrics "
                    f"(has {_listed(metrics)}); needs {op} {bound:g}"
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
            if got is None:
                if name not in self.thresholds:  # already reported there
                    failures.append(
                        f"{name}: missing or not a number in the candidate's metrics "
                        f"(has {_listed(metrics)}); the regression bound cannot be checked"
                    )
            elif base is None:
                failures.append(
                    f"{name}: serving version {version} has no recorded value to compare with "
                    f"(recorded: {_listed(baseline)}), so max_regression cannot be checked; "
                    "record its metrics, or drop the bound for this metric"
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
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        number = float(v)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _listed(source: Mapping[str, Any]) -> str:
    # the names are the training's: escaped, so one cannot add a line (a forged verdict) to the log
    names = sorted(printable(str(k)[:40]) for k in source)
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return shown or "none"
