"""What a finished training produced, read from its tasks' logs: the metrics that
``after_train`` returned, the evaluator's last metrics and the exported model version.

The training runtime prints them as event lines (``metrics``, ``eval_metrics``,
``export``); this module finds them through the backend's log reads, so it works the same
on every backend, and turns them into the training task's XCom and one summary line.
No Airflow import.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.core.deadline import SYSTEM, Clock
from airflow_tfk.core.status import Phase
from airflow_tfk.protocol.progress import last_event

log = logging.getLogger(__name__)

#: enough for the last lines of a task, where the events are
TAIL_LINES = 300


@dataclass
class TrainingResults:
    """:param metrics: what ``after_train`` returned on the exporting task.
    :param eval_metrics: the evaluator's last metrics (with the ``step`` they are of).
    :param export: ``{"model_name", "version", "path"}`` of the exported SavedModel.
    :param evaluator_error: why the evaluator failed, if it did (the training did not).
    """

    metrics: dict[str, Any] | None = None
    eval_metrics: dict[str, Any] | None = None
    export: dict[str, Any] | None = None
    evaluator_error: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_xcom(self) -> dict[str, Any]:
        export = self.export or {}
        return {
            "metrics": self.metrics,
            "eval_metrics": self.eval_metrics,
            "export": self.export,
            "model_name": export.get("model_name"),
            "model_version": export.get("version"),
            "model_path": export.get("path"),
            "evaluator_error": self.evaluator_error,
        }

    def summary(self) -> str:
        """``training results: metrics {...}; evaluator at step 600 {...}; exported ...``."""
        parts = [f"metrics {_compact(self.metrics)}"]
        if self.eval_metrics is not None:
            ev = dict(self.eval_metrics)
            step = ev.pop("step", "?")
            parts.append(f"evaluator at step {step} {_compact(ev)}")
        elif self.evaluator_error:
            parts.append(f"evaluator failed: {self.evaluator_error}")
        if self.export:
            parts.append(
                f"exported model {self.export.get('model_name')} version "
                f"{self.export.get('version')} at {self.export.get('path')}"
            )
        else:
            parts.append("no model exported")
        return "training results: " + "; ".join(parts + self.notes)


def _compact(value: Mapping[str, Any] | None) -> str:
    if value is None:
        return "none"
    return json.dumps(value, separators=(", ", ": "), default=str, sort_keys=True)


def exporting_task(replicas: Mapping[str, int]) -> tuple[str, int]:
    """The chief when there is one, else worker 0: the task that exports."""
    return ("chief", 0) if replicas.get("chief") else ("worker", 0)


def _read(backend: Backend, ref: ClusterRef, role: str, index: int) -> str:
    try:
        return backend.logs(ref, role, index, tail_lines=TAIL_LINES)
    except Exception as exc:  # results are best effort: the training has succeeded
        log.warning("cannot read the log of %s-%s: %s", role, index, exc)
        return ""


def _wait_evaluator(
    backend: Backend,
    ref: ClusterRef,
    wait_seconds: float,
    clock: Clock,
) -> Any:
    """The evaluator's status once it has exited, or its last status after ``wait_seconds``
    (it evaluates the last checkpoint after the training's end)."""
    deadline = clock.deadline(wait_seconds)
    while True:
        task = backend.status(ref).task("evaluator", 0)
        if task is None or task.phase in (Phase.SUCCEEDED, Phase.FAILED) or deadline.passed():
            return task
        deadline.pause(1.0)


def collect_results(
    backend: Backend,
    ref: ClusterRef,
    replicas: Mapping[str, int],
    *,
    evaluator_wait: float = 30.0,
    clock: Clock = SYSTEM,
) -> TrainingResults:
    """Read the results of a succeeded training (never raises for missing events)."""
    role, index = exporting_task(replicas)
    text = _read(backend, ref, role, index)
    results = TrainingResults(metrics=last_event(text, "metrics"), export=last_event(text, "export"))
    if replicas.get("evaluator"):
        task = _wait_evaluator(backend, ref, evaluator_wait, clock)
        results.eval_metrics = last_event(_read(backend, ref, "evaluator", 0), "eval_metrics")
        if task is not None and task.phase is Phase.FAILED:
            code = f", exit code {task.exit_code}" if task.exit_code is not None else ""
            detail = f": {task.message}" if task.message else ""
            results.evaluator_error = f"{task.name} failed ({task.reason or 'Error'}{code}){detail}"
        elif task is not None and task.phase is not Phase.SUCCEEDED:
            results.notes.append(
                f"the evaluator was still {task.phase.value.lower()} after {evaluator_wait:.0f} s"
            )
    return results
