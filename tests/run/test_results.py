"""A finished training's results read from its tasks' logs, on the real local backend
(tasks are tiny Python programs printing the runtime's event lines)."""

from __future__ import annotations

import sys
import time

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.status import Phase
from airflow_tfk.run.results import TrainingResults, collect_results, exporting_task
from airflow_tfk.runtime.progress import event_line
from airflow_tfk.spec.cluster import TFClusterSpec

EXPORT = {"path": "/models/m/7", "model_name": "m", "version": 7}


def program(*lines: str, exit_code: int = 0, sleep: float = 0.0) -> list[str]:
    text = "\n".join(lines)
    code = f"import sys, time; time.sleep({sleep}); print({text!r}); sys.exit({exit_code})"
    return [sys.executable, "-c", code]


@pytest.fixture
def backend(tmp_path):
    b = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), poll_interval=0.1)
    refs: list[ClusterRef] = []
    yield b, refs
    for ref in refs:
        b.delete(ref)


def run(backend, name, worker, evaluator=None):
    b, refs = backend
    data = {
        "name": name,
        "image": "local",
        "mode": "all_reduce",
        "worker": {"replicas": 1, "command": worker},
    }
    if evaluator is not None:
        data["evaluator"] = {"replicas": 1, "command": evaluator}
    spec = TFClusterSpec.from_dict({"command": ["true"], **data})
    ref = b.create(spec)
    refs.append(ref)
    deadline = time.monotonic() + 60
    while (
        b.status(ref).task("worker", 0) is None
        or b.status(ref).task("worker", 0).phase is not Phase.SUCCEEDED
    ):
        assert time.monotonic() < deadline, b.status(ref)
        time.sleep(0.1)
    return b, ref, {r: s.replicas for r, s in spec.roles().items()}


def test_exporting_task():
    assert exporting_task({"chief": 1, "ps": 1, "worker": 2}) == ("chief", 0)
    assert exporting_task({"ps": 1, "worker": 2}) == ("worker", 0)


def test_metrics_export_and_the_evaluators_last_metrics(backend):
    worker = program(
        event_line("metrics", accuracy=0.5),
        event_line("metrics", accuracy=0.93, rows=10),
        event_line("export", **EXPORT),
    )
    evaluator = program(
        event_line("eval_metrics", step=100, accuracy=0.8),
        event_line("eval_metrics", step=200, accuracy=0.91),
        sleep=1.0,  # still evaluating when the training is done
    )
    b, ref, replicas = run(backend, "res-ok", worker, evaluator)
    results = collect_results(b, ref, replicas, evaluator_wait=30)
    assert results.metrics == {"accuracy": 0.93, "rows": 10}
    assert results.eval_metrics == {"step": 200, "accuracy": 0.91}
    xcom = results.to_xcom()
    assert xcom["export"] == EXPORT
    assert (xcom["model_name"], xcom["model_version"], xcom["model_path"]) == ("m", 7, "/models/m/7")
    assert xcom["evaluator_error"] is None
    line = results.summary()
    assert '"accuracy": 0.93' in line and "evaluator at step 200" in line
    assert "exported model m version 7 at /models/m/7" in line


def test_a_failed_evaluator_is_reported_not_raised(backend):
    worker = program(event_line("export", **EXPORT))
    evaluator = program(event_line("eval_metrics", step=100, loss=2.0), "boom", exit_code=3)
    b, ref, replicas = run(backend, "res-evalfail", worker, evaluator)
    results = collect_results(b, ref, replicas, evaluator_wait=30)
    assert results.evaluator_error is not None
    assert (
        results.evaluator_error.startswith("evaluator-0 failed") and "exit code 3" in results.evaluator_error
    )
    assert results.eval_metrics == {"step": 100, "loss": 2.0}  # what it had before failing
    assert results.to_xcom()["model_version"] == 7


def test_no_events_no_export():
    results = TrainingResults()
    assert results.to_xcom()["model_version"] is None
    assert results.summary() == "training results: metrics none; no model exported"
