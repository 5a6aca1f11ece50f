"""The scheduled-training DAG's kill_previous policy, with two real `airflow dags test` runs
of `tfk_scheduled_training` on the local backend: the second run kills the first run's
cluster before it trains, and the first run fails with a message naming the second.

The two runs use separate Airflow homes (SQLite allows one writer) but the same local
backend root, as two scheduler-driven runs share one Kubernetes cluster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import cluster_processes, dags_test, migrated_airflow_home

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
AIRFLOW = str(Path(sys.executable).parent / "airflow")


def yield_cpu(pids: list[int]) -> None:
    """The lowest CPU priority (nice 19) for every thread of ``pids`` and of their
    descendants; threads and processes they start later inherit it. (A process's nice
    value is per thread on Linux: renicing only the pid would leave TF's threads as they were.)"""
    procs: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs.update({p.pid: p for p in [root, *root.children(recursive=True)]})
        except psutil.NoSuchProcess:
            pass
    for proc in procs.values():
        try:
            for thread in proc.threads():
                os.setpriority(os.PRIO_PROCESS, thread.id, 19)
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass  # it exited meanwhile


def test_kill_previous_kills_the_running_first_run(airflow_env, tmp_path) -> None:
    from airflow_tfk.backends.local.backend import LocalBackend

    local_root = tmp_path / "tfk-local"  # only this test's clusters
    first_env = {**airflow_env.env, "TFK_LOCAL_ROOT": str(local_root)}
    second_home = tmp_path / "second-home"
    migrated_airflow_home(second_home)  # its own SQLite database, migrated like the first's
    second_env = {**first_env, "AIRFLOW_HOME": str(second_home)}

    first = subprocess.Popen(
        [
            AIRFLOW,
            "dags",
            "test",
            "tfk_scheduled_training",
            "2026-01-01T00:00:00+00:00",
            "--conf",
            json.dumps({"steps": 1_000_000}),
        ],
        env=first_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        backend = LocalBackend(str(local_root))
        deadline = time.monotonic() + 300
        while not any(True for _ in local_root.glob("default/tfk-*/state.json")):
            assert first.poll() is None, first.stdout.read()[-4000:]
            assert time.monotonic() < deadline, "the first run never created its cluster"
            time.sleep(1)
        first_cluster = next(local_root.glob("default/tfk-*/state.json")).parent.name
        # The first run only has to stay alive while the second starts. At full speed its
        # four TF processes take both cores from the second run's Airflow start-up.
        yield_cpu([first.pid, *cluster_processes(local_root)])

        second = dags_test(
            second_env,
            "tfk_scheduled_training",
            "2026-01-01T02:00:00+00:00",
            conf={"steps": 50, "ps_grace_seconds": 0},
            timeout=900,
        )
        out2 = second.stdout + second.stderr
        assert second.returncode == 0, out2[-5000:]
        assert f"killing cluster {first_cluster} of an earlier run" in out2

        newer_run = re.search(r"killed by the newer run (\S+) of", out2)
        assert newer_run, out2[-5000:]
        out1, _ = first.communicate(timeout=300)
        assert first.returncode != 0
        failure = [line for line in out1.splitlines() if "killed by the newer run" in line]
        assert failure, out1[-5000:]
        assert newer_run.group(1) in failure[-1] and "kill_previous" in failure[-1]
        from airflow_tfk.backends.base import ClusterRef

        assert not backend.exists(ClusterRef(first_cluster, "default"))
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
