"""parameter_server mode with workers lost for good, on the real local backend with real
TensorFlow: ``max_lost_workers`` lets the chief go on with the workers that are left
(TensorFlow's ClusterCoordinator reschedules a lost worker's steps on the others); one
more lost worker fails the training, naming every lost worker."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from airflow_tfk.backends.local import LocalBackend
from airflow_tfk.policies import Outcome
from airflow_tfk.runtime.progress import last_progress
from airflow_tfk.spec import Mode, TFClusterSpec
from airflow_tfk.status import Phase
from airflow_tfk.watch import wait_for_cluster
from tests.runtime.test_preemption import _child_pid, _wait_for_step

pytestmark = pytest.mark.e2e

STEPS = 3000
RETURN_STEPS = 1000  # enough after the return to show the worker is back


def _run(tmp_path, workers: int, kill: list[int], max_lost: int):
    shape = {"ps": 1, "worker": workers, "chief": 1}
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), restart_backoff_seconds=0.2)
    backend.claim_path("default", "tfk-models")
    spec = TFClusterSpec.from_dict(
        {
            "name": "lost",
            "image": "local",
            "mode": "parameter_server",
            "command": [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": ["--tfk_steps", str(STEPS), "--tfk_progress_every", "50"],
            "storage": {"models": {"claim": "tfk-models"}},
            **{role: {"replicas": n} for role, n in shape.items()},
            "retries_per_index": 0,  # a killed worker is lost for good
            "ps_grace_seconds": 0,
            "max_lost_workers": max_lost,
        }
    )
    ref = backend.create(spec)
    try:
        _wait_for_step(backend, ref, "chief", 0, 300, timeout=600)
        for index in kill:
            os.kill(_child_pid(backend, ref, "worker", index), signal.SIGKILL)
        killed_at = time.time()
        verdict = wait_for_cluster(
            backend, ref, Mode.PARAMETER_SERVER, shape, timeout=900, emit=print, max_lost_workers=max_lost
        )
        status = backend.status(ref)
        chief_log = backend.logs(ref, "chief", 0)
    finally:
        backend.delete(ref)
    return verdict, status, chief_log, killed_at


def test_one_worker_lost_for_good_within_the_bound_succeeds(tmp_path):
    verdict, status, chief_log, _ = _run(tmp_path, workers=2, kill=[1], max_lost=1)
    assert verdict.outcome is Outcome.SUCCEEDED, verdict
    assert status.task("worker", 1).phase is Phase.FAILED  # it never came back
    final = last_progress(chief_log)
    assert (final.step, final.status) == (STEPS, "done"), final


def test_two_workers_lost_past_the_bound_fail_naming_both(tmp_path):
    verdict, _, _, _ = _run(tmp_path, workers=3, kill=[0, 1], max_lost=1)
    assert verdict.outcome is Outcome.FAILED, verdict
    assert "lost-worker-0" in verdict.message or "worker-0" in verdict.message, verdict.message
    assert "worker-1" in verdict.message and "max_lost_workers=1" in verdict.message, verdict.message
