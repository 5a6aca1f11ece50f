"""A budget on the real local backend, through the operator, with real TensorFlow.

A one-worker training requesting one core is paced to end about 60 s after it starts:
about 0.017 requested core-hours. Its budget is 0.005 core-hours with
``checkpoint_and_stop``, so the projection at completion crosses the cap from the first
progress line that has an ETA. The run ends on that line (within one progress line of the
crossing), failed, its message naming the budget, and nothing of it is left: no process,
no cluster.
"""

from __future__ import annotations

import re
import sys

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.operators.training import TFTrainingOperator
from tests.helpers import assert_no_processes, task_context

pytestmark = pytest.mark.e2e

STEPS, PACE = 1200, 0.05  # about 60 s of training
CAP = 0.005  # core-hours: 18 core-seconds
LINE = re.compile(r"\[worker-0\] step (\d+)/\d+ .*ETA (?!unknown)")
ALERT = re.compile(
    r"budget forecast: at step (\d+)/\d+ the training is projected to hold ([0-9.]+) core-hours"
)


def test_a_budget_below_the_projection_ends_the_run_on_the_crossing_line(
    local_root, caplog, capfd, summary_line
):
    spec = {
        "image": "local",
        "mode": "all_reduce",
        "command": [sys.executable, "-m", "tests.run.paced_app"],
        "args": ["--tfk_steps", str(STEPS), "--tfk_progress_every", "20", "--pace_seconds", str(PACE)],
        "worker": {"replicas": 1, "resources": {"cpu": "1"}},
        "retries_per_index": 0,
        "budget": {"core_hours": CAP, "action": "checkpoint_and_stop"},
    }
    caplog.set_level("INFO")
    ctx = task_context()
    op = TFTrainingOperator(
        task_id="train", backend="local", cluster_spec=spec, progress_interval=2.0, cleanup="all"
    )
    with pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    out = capfd.readouterr().out + caplog.text
    message = str(err.value)
    assert "budget" in message and f"{CAP:g} core-hours" in message, message
    alerts = ALERT.findall(out)  # the alert, then the delete's and the failure's reason
    assert alerts and len(set(alerts)) == 1, alerts
    step, projected = int(alerts[0][0]), float(alerts[0][1])
    assert projected > CAP, alerts
    # the run ended on the first line that had an ETA: the crossing's own line
    with_eta = [int(s) for s in LINE.findall(out)]
    assert with_eta and with_eta[0] == step, (with_eta, step)
    ti = ctx["ti"]
    ref = ClusterRef(RunIdentity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index).cluster_name(), "default")
    assert not LocalBackend(str(local_root)).exists(ref)
    assert_no_processes(local_root)
    summary_line(
        f"budget on the local backend: {CAP:g} core-hours against a projection of {projected:.4g}: "
        f"stopped at step {step} of {STEPS}, the first progress line with an ETA; nothing left"
    )
