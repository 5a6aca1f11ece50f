"""parameter_server mode with lost workers, on the real local backend with real TensorFlow:
``max_lost_workers`` lets the chief go on with the workers that are left (TensorFlow's
ClusterCoordinator reschedules a lost worker's steps on the others); one more lost worker
fails the training, naming every lost worker; a worker that returns is taken back and
runs steps again."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.status import Phase
from airflow_tfk.run.policies import Outcome
from airflow_tfk.run.wait import wait_for_cluster
from airflow_tfk.runtime.progress import last_progress
from airflow_tfk.spec.cluster import Mode, TFClusterSpec
from tests.runtime.test_preemption import _child_pid, _wait_for_step

pytestmark = pytest.mark.e2e

STEPS = 3000
#: the returning-worker case: enough steps after the return to show the worker is back
RETURN_STEPS = 1000


def _spec(workers: int, retries: int, max_lost: int, steps: int = STEPS) -> TFClusterSpec:
    shape = {"ps": 1, "worker": workers, "chief": 1}
    return TFClusterSpec.from_dict(
        {
            "name": "lost",
            "image": "local",
            "mode": "parameter_server",
            "command": [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": ["--tfk_steps", str(steps), "--tfk_progress_every", "50"],
            "storage": {"models": {"claim": "tfk-models"}},
            **{role: {"replicas": n} for role, n in shape.items()},
            "retries_per_index": retries,
            "ps_grace_seconds": 0,
            "max_lost_workers": max_lost,
        }
    )


def _run(tmp_path, workers: int, kill: list[int], max_lost: int):
    shape = {"ps": 1, "worker": workers, "chief": 1}
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), restart_backoff_seconds=0.2)
    backend.claim_path("default", "tfk-models")
    # retries_per_index 0: a killed worker is lost for good
    ref = backend.create(_spec(workers, retries=0, max_lost=max_lost))
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


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_returning_worker_is_taken_back_and_runs_steps_again(tmp_path):
    """The only worker is killed mid-training and restarted by the supervisor: with no
    other worker, every step after the kill can only run on the returned process, so the
    training reaching its last step shows the chief took it back."""
    shape = {"ps": 1, "worker": 1, "chief": 1}
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), restart_backoff_seconds=0.2)
    backend.claim_path("default", "tfk-models")
    ref = backend.create(_spec(1, retries=1, max_lost=0, steps=RETURN_STEPS))
    try:
        _wait_for_step(backend, ref, "chief", 0, 300, timeout=600)
        first = _child_pid(backend, ref, "worker", 0)
        os.kill(first, signal.SIGKILL)
        killed_at = time.time()
        deadline = time.monotonic() + 600
        while True:  # the supervisor starts a new process for the same index
            try:
                returned = _child_pid(backend, ref, "worker", 0)
            except (AssertionError, OSError, ValueError):
                returned = first
            if returned != first:
                break
            assert time.monotonic() < deadline, "worker-0 was not restarted"
            time.sleep(0.2)
        stalled = last_progress(backend.logs(ref, "chief", 0))
        assert stalled is not None and stalled.step < RETURN_STEPS - 100, stalled
        # progress again, which only the returned worker can make
        again = _wait_for_step(backend, ref, "chief", 0, stalled.step + 100, timeout=600)
        again_after = time.time() - killed_at
        cpu = _cpu_seconds(returned)
        verdict = wait_for_cluster(backend, ref, Mode.PARAMETER_SERVER, shape, timeout=900, emit=print)
        chief_log = backend.logs(ref, "chief", 0)
        status = backend.status(ref)
    finally:
        backend.delete(ref)
    assert verdict.outcome is Outcome.SUCCEEDED, verdict
    final = last_progress(chief_log)
    assert (final.step, final.status) == (RETURN_STEPS, "done"), final
    assert "resumed" not in chief_log  # the chief went on: never restarted, nothing restored
    worker = status.task("worker", 0)
    assert worker is not None and worker.restarts == 1, worker
    print(
        f"worker-0 killed at chief step >= 300, chief stalled at {stalled.step}; the returned worker "
        f"(pid {returned}, {cpu:.1f} CPU-s by step {again}) ran steps {stalled.step}..{RETURN_STEPS}; "
        f"progress again {again_after:.1f}s after the kill"
    )
