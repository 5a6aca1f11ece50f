"""between_graph mode on real local clusters: synchronous replicas (--tfk_sync) aggregate
every replica's gradients into one update and all end together."""

import sys

import pytest

from airflow_tfk.runtime.examples.digits_app import ACCURACY_THRESHOLD
from airflow_tfk.runtime.progress import last_event, last_progress

pytestmark = pytest.mark.e2e

APP = [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"]


def test_sync_replicas_aggregate_and_every_worker_exits_0(local_cluster, tmp_path):
    steps = 150
    c = local_cluster(
        {"ps": 1, "worker": 3},
        lambda role, i: [*APP, "--tfk_sync", "--tfk_steps", str(steps), "--tfk_progress_every", "50"],
        mode="between_graph",
        env={"TFK_MODEL_DIR": str(tmp_path / "models")},
    )
    c.start_all()
    replicas = []
    for i in range(3):
        assert c.wait("worker", i, timeout=240) == 0, c.describe()
        out = c.stdout("worker", i)
        replicas.append(last_event(out, "replica"))
        final = last_progress(out)
        assert (final.step, final.status) == (steps, "done")
    # every worker stopped at the same global step, the last one
    assert {r["global_step"] for r in replicas} == {steps}, replicas
    # the global step advanced once per aggregated update: each of the 3 replicas took
    # part in (nearly) every one of the `steps` updates, so they ran ~3x `steps` batches;
    # asynchronous replicas would share the `steps` between them
    assert sum(r["local_steps"] for r in replicas) >= 2.5 * steps, replicas
    assert all(r["local_steps"] >= steps - 5 for r in replicas), replicas
    metrics = last_event(c.stdout("worker", 0), "metrics")
    assert metrics["accuracy"] >= ACCURACY_THRESHOLD - 0.1, metrics
    assert (tmp_path / "models" / "digits" / "1" / "saved_model.pb").is_file()
