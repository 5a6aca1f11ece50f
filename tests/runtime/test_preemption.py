"""Checkpoint on notice, end to end on the real local backend with real TensorFlow.

A SIGTERM to a training task mid-training (what a preemption, an eviction or a node
drain sends) makes it save a checkpoint at the next step boundary and exit 76; the
local supervisor restarts it without counting a retry (``retries_per_index`` is 0 here,
so a counted retry would fail the training); the new attempt resumes from the checkpoint
saved on notice, not from the last periodic one, states the steps lost and the recovery
time, and the training succeeds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time

import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED
from airflow_tfk.run.policies import Outcome
from airflow_tfk.run.wait import wait_for_cluster
from airflow_tfk.runtime.progress import last_progress
from airflow_tfk.spec.cluster import Mode, TFClusterSpec

pytestmark = pytest.mark.e2e

STEPS, EVERY_CKPT = 4000, 1000
SAVED = re.compile(r"checkpoint saved on notice at step (\d+)")
RESUMED = re.compile(r"resumed at step (\d+): (\d+) step\(s\) lost")
AGAIN = re.compile(r"training again at step (\d+), ([0-9.]+)s after")

SHAPES = {
    "all_reduce": ({"worker": 2}, ("worker", 0)),
    "between_graph": ({"ps": 1, "worker": 2}, ("worker", 0)),
    "parameter_server": ({"ps": 1, "worker": 2, "chief": 1}, ("chief", 0)),
}
# between_graph: worker 1 trains on alone while the chief restarts; enough steps that it
# has not finished them all by then
TOTAL = {"between_graph": 3 * STEPS}


def _spec(mode: str, name: str, shape: dict[str, int], steps: int = STEPS) -> TFClusterSpec:
    return TFClusterSpec.from_dict(
        {
            "name": name,
            "image": "local",
            "mode": mode,
            "command": [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": [
                "--tfk_steps",
                str(steps),
                "--tfk_checkpoint_every",
                str(EVERY_CKPT),
                "--tfk_progress_every",
                "20",
            ],
            "storage": {"models": {"claim": "tfk-models"}},
            **{role: {"replicas": n} for role, n in shape.items()},
            "retries_per_index": 0,
            "ps_grace_seconds": 0,
            "termination_grace_seconds": 60,
        }
    )


def _child_pid(backend: LocalBackend, ref, role: str, index: int) -> int:
    status = json.loads((backend._task_dir(ref, role, index) / "status.json").read_text())
    assert status["state"] == "running", status
    return int(status["pid"])


def _wait_for_step(backend: LocalBackend, ref, role: str, index: int, step: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        progress = last_progress(backend.logs(ref, role, index))
        if progress is not None and progress.step >= step:
            return progress.step
        time.sleep(0.2)
    raise AssertionError(f"{role}-{index} did not reach step {step} within {timeout}s")


@pytest.mark.parametrize("mode", list(SHAPES))
def test_sigterm_checkpoints_at_the_notice_and_the_restart_resumes_from_it(tmp_path, mode):
    shape, (role, index) = SHAPES[mode]
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), restart_backoff_seconds=0.2)
    backend.claim_path("default", "tfk-models")
    total = TOTAL.get(mode, STEPS)
    ref = backend.create(_spec(mode, f"pre-{mode.replace('_', '-')}", shape, total))
    try:
        # between two periodic checkpoints, so a resume from the periodic one would show
        seen = _wait_for_step(backend, ref, role, index, EVERY_CKPT + EVERY_CKPT // 4, timeout=600)
        assert seen < 2 * EVERY_CKPT, f"too fast to land between two periodic checkpoints: {seen}"
        os.kill(_child_pid(backend, ref, role, index), signal.SIGTERM)
        sent = time.time()
        verdict = wait_for_cluster(backend, ref, Mode(mode), shape, timeout=900, emit=print)
        log = backend.logs(ref, role, index)
        status = backend.status(ref)
    finally:
        backend.delete(ref)
    print("\n".join(line for line in log.splitlines() if '"progress"' not in line)[-6000:])
    assert verdict.outcome is Outcome.SUCCEEDED, verdict
    saved = [int(s) for s in SAVED.findall(log)]
    assert len(saved) == 1, saved
    # the checkpoint is the notice's: at or after the step seen before the signal, and
    # not a periodic one
    assert saved[0] >= seen and saved[0] % EVERY_CKPT != 0, (seen, saved)
    assert f"exiting with {EXIT_PREEMPTED}" in log
    assert "not counted as a retry" in log  # the supervisor restarted it without counting
    resumed = [(int(a), int(b)) for a, b in RESUMED.findall(log)]
    assert resumed, "the restarted attempt did not state its losses"
    step, lost = resumed[0]
    if mode == "between_graph":
        # the variables live on the ps, which kept them, and worker 1 went on training:
        # the restarted chief goes on from the ps (no restore rolls them back)
        assert "the ps still hold the training's variables" in log
        assert step >= saved[0] and lost == 0, (resumed, saved)
    else:
        assert step == saved[0] and lost == 0, (resumed, saved)
    again = AGAIN.findall(log)
    assert again, "the restarted attempt did not state its recovery time"
    recovery = float(again[0][1])
    assert 0 < recovery < time.time() - sent + 5, recovery
    final = last_progress(log)
    assert (final.step, final.status) == (total, "done")
    task = status.task(role, index)
    assert task is not None and task.exit_code == 0
    print(
        f"{mode}: notice at step >= {seen}, saved at {saved[0]}, resumed at {step}, lost {lost}, "
        f"training again {recovery:.1f}s after the stop"
    )
