"""between_graph mode end to end on the real local backend: synchronous replicas
(--tfk_sync) aggregate every replica's gradients into one update, all stop at the same
global step and exit 0, and the provider's success policy sees the training succeed."""

import sys

import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.status import Phase
from airflow_tfk.run.policies import Outcome
from airflow_tfk.run.wait import wait_for_cluster
from airflow_tfk.runtime.examples.digits_app import ACCURACY_THRESHOLD
from airflow_tfk.runtime.progress import last_event, last_progress
from airflow_tfk.spec.cluster import Mode, TFClusterSpec

pytestmark = pytest.mark.e2e


def test_sync_replicas_aggregate_and_every_worker_exits_0(tmp_path):
    steps, workers = 150, 3
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path))
    models = backend.claim_path("default", "tfk-models")
    spec = TFClusterSpec.from_dict(
        {
            "name": "sync-bg",
            "image": "local",
            "mode": "between_graph",
            "command": [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": ["--tfk_sync", "--tfk_steps", str(steps), "--tfk_progress_every", "50"],
            "storage": {"models": {"claim": "tfk-models"}},
            "ps": {"replicas": 1},
            "worker": {"replicas": workers},
            "retries_per_index": 0,
            "ps_grace_seconds": 0,
        }
    )
    ref = backend.create(spec)
    try:
        verdict = wait_for_cluster(
            backend, ref, Mode.BETWEEN_GRAPH, {"ps": 1, "worker": workers}, timeout=300, emit=print
        )
        assert verdict.outcome is Outcome.SUCCEEDED, verdict
        status = backend.status(ref)
        assert [(t.phase, t.exit_code) for t in status.of_role("worker")] == [(Phase.SUCCEEDED, 0)] * workers
        logs = [backend.logs(ref, "worker", i) for i in range(workers)]
    finally:
        backend.delete(ref)
    replicas = [last_event(text, "replica") for text in logs]
    for text in logs:
        final = last_progress(text)
        assert (final.step, final.status) == (steps, "done")
    # every worker stopped at the same global step, the last one
    assert {r["global_step"] for r in replicas} == {steps}, replicas
    # the global step advanced once per aggregated update: each of the 3 replicas took
    # part in (nearly) every one of the `steps` updates, so they ran ~3x `steps` batches
    # between them; asynchronous replicas would share the `steps`
    assert sum(r["local_steps"] for r in replicas) >= 2.5 * steps, replicas
    assert all(r["local_steps"] >= steps - 5 for r in replicas), replicas
    metrics = last_event(logs[0], "metrics")
    assert metrics["accuracy"] >= ACCURACY_THRESHOLD - 0.1, metrics
    assert (models / "digits" / "1" / "saved_model.pb").is_file()
