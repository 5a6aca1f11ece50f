"""The plain TF1 between-graph script, run unmodified through the launcher."""

import pytest

from airflow_tfk.runtime.progress import last_event, last_progress
from tests.runtime.tf1_reliability import tf1_command

pytestmark = pytest.mark.e2e


def test_tf1_script_through_launch(local_cluster, tmp_path):
    # here, not at the top: the example imports TensorFlow, and every collection would pay it
    from airflow_tfk.runtime.examples import tf1_between_graph

    steps = 400
    ckpt = tmp_path / "ckpt"
    c = local_cluster(
        {"ps": 1, "worker": 2},
        lambda role, i: tf1_command(steps, "--checkpoint_dir", str(ckpt)),
        mode="between_graph",
    )
    c.start_all()
    for i in range(2):
        assert c.wait("worker", i, timeout=150) == 0, c.describe()
        out = c.stdout("worker", i)
        metrics = last_event(out, "metrics")
        assert metrics["worker"] == i
        assert metrics["accuracy"] >= tf1_between_graph.ACCURACY_THRESHOLD, metrics
        final = last_progress(out)
        assert (final.step, final.total_steps, final.status) == (steps, steps, "done")
        assert f"--job_name=worker --task_index={i}" in c.stderr("worker", i)
    assert c.procs[("ps", 0)].poll() is None  # ps serve until deleted
    assert (ckpt / "checkpoint").is_file()  # worker 0, the chief, checkpointed


def test_a_worker_that_starts_after_its_peers_exited_completes(local_cluster):
    """What hung unmodified scripts: worker 2 of 3 comes up after workers 0 and 1 have
    finished. Without device filters its session would wait for them forever; through
    the launcher it sees only the ps and itself, and exits at once (the global step is
    already at the end)."""
    c = local_cluster(
        {"ps": 2, "worker": 3},
        lambda role, i: tf1_command(200),
        mode="between_graph",
    )
    c.start_all(["ps"])
    c.start("worker", 0)
    c.start("worker", 1)
    for i in range(2):  # they do not wait for worker 2 either
        assert c.wait("worker", i, timeout=150) == 0, c.describe()
    c.start("worker", 2)
    assert c.wait("worker", 2, timeout=90) == 0, c.describe()
    final = last_progress(c.stdout("worker", 2))
    assert (final.step, final.status) == (200, "done")
