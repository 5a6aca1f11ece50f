"""``budget:``: a cap on what a training may hold, acted on before it is crossed.

The wait projects what the training will have held when it completes (every task's
requests, from the create to the progress's ETA) and acts once that projection crosses
the cap: ``warn`` (a line; the run goes on) or ``checkpoint_and_stop`` (the run ends at
once, failed, its tasks saving a checkpoint on their notice). ``cost`` is priced by the
platform's table (``[tfk] prices``), so a training file never sets the prices its cap is
judged by. See ``airflow_tfk.run.forecast``.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.decl import Errors, choice_field, spec_field

#: what a budget's projection crossing its cap does (as a deadline forecast's actions)
BUDGET_ACTIONS = ("warn", "checkpoint_and_stop")


@dataclass(frozen=True)
class BudgetSpec:
    """A cap in requested core-hours, or in money, or both (the first crossed acts)."""

    core_hours: float | None = spec_field(
        None,
        kind="number",
        lo=0.001,
        hi=1e9,
        help="the most requested core-hours the training may hold (every task's CPU request times "
        "its run time)",
    )
    cost: float | None = spec_field(
        None,
        kind="number",
        lo=0.000001,
        hi=1e12,
        help="the most it may cost, priced by the platform's `[tfk] prices` (needs that table)",
    )
    action: str = choice_field(
        "warn",
        BUDGET_ACTIONS,
        help_tail=": once the projection at completion crosses the cap, a line and the run goes on, or "
        "the run ends at once, failed, with a checkpoint",
    )

    def _rules(self, where: str, errors: Errors) -> None:
        errors.run(lambda: self._a_cap(where), f"{where}.core_hours", f"{where}.cost")

    def _a_cap(self, where: str) -> None:
        if self.core_hours is None and self.cost is None:
            raise SpecError(where, "needs 'core_hours' or 'cost' (or both)")
