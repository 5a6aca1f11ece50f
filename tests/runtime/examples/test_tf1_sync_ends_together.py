"""An unmodified synchronous TF1 script (SyncReplicasOptimizer, MonitoredTrainingSession
with its defaults) run through the launcher: every task exits within 10 s of the others.
The chief used to exit 120 s after the workers: closing its session waited TF's default
``stop_grace_period_secs`` for its aggregation queue runner, which waits for gradients no
worker sends any more; the launcher's TF1 shim shortens that default. The shim's progress
lines (the script prints none) show the global step and end ``done`` at the last step.

``TFK_TF1_SYNC_RUNS`` repeats it (10 for the issue's 10 out of 10)."""

import os
import re
import sys
from pathlib import Path

import pytest

from airflow_tfk.protocol.progress import parse_line

pytestmark = pytest.mark.e2e

SCRIPT = str(Path(__file__).resolve().parents[1] / "tf1_sync_script.py")
RUNS = int(os.environ.get("TFK_TF1_SYNC_RUNS", "1"))


@pytest.mark.parametrize("run", range(RUNS))
def test_every_task_exits_within_10s_of_the_others(local_cluster, run):
    launch = [sys.executable, "-m", "airflow_tfk.runtime.launch", "--tf1-flags", "--"]
    c = local_cluster(
        {"ps": 1, "worker": 2},
        lambda role, i: [*launch, sys.executable, SCRIPT, "--train_steps", "60"],
        mode="between_graph",
    )
    c.start_all()
    for i in range(2):
        assert c.wait("worker", i, timeout=240) == 0, c.describe()
    ends = [float(re.search(r"exited ([0-9.]+)", c.stdout("worker", i)).group(1)) for i in range(2)]
    assert max(ends) - min(ends) < 10, ends
    # The shim's progress lines: the script prints none of its own.
    for i in range(2):
        lines = [p for p in map(parse_line, c.stdout("worker", i).splitlines()) if p is not None]
        assert lines and lines[0].status == "running" and lines[0].total_steps == 60, lines
        assert (lines[-1].step, lines[-1].total_steps, lines[-1].status) == (60, 60, "done"), lines
