"""The trigger never blocks the triggerer's event loop, and waits through one client.

A deferred training's trigger runs in a fresh interpreter (``_trigger_debug``) from its
start to its event under asyncio's debug mode, with a slow-callback threshold of 0.1 s:
any "Executing ... took" warning fails the test. A Job watch request lasts a second there
(five minutes by default), so the few seconds the workers take cross several of them:
they must all go through the one client, with the Jobs listed once and their watch
resumed from its resourceVersion rather than listed again, and no pod watch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from k8s import harness

from airflow_tfk.core import naming
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

HERE = Path(__file__).resolve().parent
WATCH_SECONDS = 1


def test_trigger_start_to_event_never_blocks_the_loop(k8s_api, tfk_ns, tfk_conn, tmp_path) -> None:
    from airflow_tfk._airflow.compat import TaskDeferred

    ctx = _tfk.task_context("manual__loop")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, "between_graph", workers=3, ps=1), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    _, kwargs = deferred.value.trigger.serialize()

    go_at = [float("inf")]  # set once the trigger has started

    def workers_after_a_while(pod):
        # Told to exit 8 s after the trigger's process says it started, by this clock: the
        # trigger then still builds its backend (imports that take seconds in a fresh
        # process) before its first Job watch, and CI saw the workers finish within that
        # first 1 s watch request when they were told 3 s after the start.
        role = pod.metadata.labels.get(naming.LABEL_ROLE)
        if role != "worker" or time.monotonic() < go_at[0]:
            return None
        return {harness.EXIT_CODE: "0"}

    env = {
        **os.environ,
        "TFK_LOOP_STACKS": str(tmp_path / "stacks.txt"),
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, "-m", "k8s_integration._trigger_debug", json.dumps(kwargs), str(WATCH_SECONDS)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the trigger's start: imports done in the process
        assert first.strip() == "started", first + proc.communicate(timeout=60)[1][-4000:]
        go_at[0] = time.monotonic() + 8.0
        with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=workers_after_a_while):
            stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-4000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["event"]["status"] == "success", out["event"]
    if out["slow"]:  # wall time: reported; the OS may have run others meanwhile
        print("\n".join(["asyncio's slow-callback warnings:", *out["slow"]]))
    if out["busy"]:  # the loop thread's stack while it was blocked: what to fix
        stacks = (tmp_path / "stacks.txt").read_text() if (tmp_path / "stacks.txt").exists() else ""
        pytest.fail("\n".join(out["busy"] + out["slow"]) + "\n" + stacks[:12000], pytrace=False)
    assert out["sessions"] == 1, out
    requests = out["requests"]
    assert requests.get("GET jobs") == 1 and "WATCH pods" not in requests, requests
    assert requests.get("WATCH jobs", 0) >= 2, requests  # requests crossed, resumed from there
