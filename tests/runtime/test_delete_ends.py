"""Ending a running parameter_server cluster takes seconds, not the grace period.

On the real local backend with real TensorFlow: a chief, a ps and two workers train the
digits app with checkpoints (so the chief's notice path, drain then save, is the one
taken), the grace is the default 60 s, and the cluster is ended mid-training - by a
delete (``clusters delete``, a kill or a timeout of the Airflow task) and by ``end_run``
as a sweep ends a pruned trial. Every process of the cluster, the chief and the
supervisors included, is gone within 10 s; the chief's log says it stopped on notice
because its peers were gone, not because the grace (or its notice's bound) ran out.
"""

from __future__ import annotations

import json
import re
import sys
import time

import psutil
import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.run.ending import end_run
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.runtime.progress import last_progress
from airflow_tfk.spec import TFClusterSpec

pytestmark = pytest.mark.e2e

ENDED_WITHIN = 10.0
SHAPE = {"chief": 1, "ps": 1, "worker": 2}


def _spec(name: str) -> TFClusterSpec:
    return TFClusterSpec.from_dict(
        {
            "name": name,
            "image": "local",
            "mode": "parameter_server",
            "command": [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": [
                "--tfk_steps",
                "1000000",
                "--tfk_checkpoint_every",
                "1000",
                "--tfk_progress_every",
                "20",
            ],
            "storage": {"models": {"claim": "tfk-models"}},
            **{role: {"replicas": n} for role, n in SHAPE.items()},
            "retries_per_index": 0,
            "termination_grace_seconds": 60,
        }
    )


def _processes(backend: LocalBackend, ref) -> dict[str, psutil.Process]:
    """Every task's process and its supervisor, by name."""
    procs = {}
    for role, n in SHAPE.items():
        for index in range(n):
            tdir = backend._task_dir(ref, role, index)
            status = json.loads((tdir / "status.json").read_text())
            assert status["state"] == "running", (role, index, status)
            procs[f"{role}-{index}"] = psutil.Process(int(status["pid"]))
            supervisor = json.loads((tdir / "supervisor.json").read_text())
            procs[f"supervisor of {role}-{index}"] = psutil.Process(int(supervisor["pid"]))
    return procs


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("how", ["delete", "pruned"])
def test_every_process_of_a_deleted_parameter_server_cluster_is_gone_within_10s(tmp_path, how):
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path))
    backend.claim_path("default", "tfk-models")
    spec = _spec(f"end-{how}")
    ref = backend.create(spec)
    try:
        deadline = time.monotonic() + 600
        while (p := last_progress(backend.logs(ref, "chief", 0))) is None or p.step < 40:
            assert time.monotonic() < deadline, "the chief never trained"
            time.sleep(0.3)
        procs = _processes(backend, ref)
        started = time.monotonic()
        if how == "delete":
            backend.delete(ref, "deleted by the test")
        else:  # as the sweep ends a trial its pruner stopped (SweepRunner._end)
            end_run(ClusterHandle.for_spec(spec, backend), "trial 3 pruned at step 40", log_lines=0)
        returned = time.monotonic() - started
        while any(_alive(p) for p in procs.values()) and time.monotonic() - started < 70:
            time.sleep(0.05)
        ended = time.monotonic() - started
        left = sorted(name for name, p in procs.items() if _alive(p))
    finally:
        backend.delete(ref)
    chief = backend.logs(ref, "chief", 0)
    print("\n".join(line for line in chief.splitlines() if "[tfk" in line))
    print(f"{how}: returned after {returned:.1f}s, every process gone after {ended:.1f}s")
    assert not left and ended < ENDED_WITHIN, (left, ended)
    assert returned < ENDED_WITHIN, returned
    assert "SIGTERM: notice received" in chief
    # why it did not wait: its peers were gone (the watchdog saw it, or a call to them failed)
    assert "on notice: " in chief
    assert re.search(r"\[tfk-local\] exited [0-9.]+s after SIGTERM \(exit code 76\)", chief), chief[-2000:]
    assert "still waiting for" not in chief  # the notice's watchdog did not have to end it
    assert "still running 60s after SIGTERM: SIGKILL" not in chief
