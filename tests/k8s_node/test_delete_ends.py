"""Ending a running parameter_server cluster on the real node takes less than its grace.

A chief, a ps and two workers train the digits app with checkpoints in a models volume (so
the chief's notice path, drain then save, is the one taken), each pod with the default
termination grace of 60 s. The task is killed (``on_kill``, as a kill or a timeout of the
Airflow task does): every pod is gone and no container process is left on the node
before the grace, so no task sat out its 60 s waiting for gone peers (without the runtime's
peer watch after the notice, the same cluster took 60.5 s on the local backend: the chief
blocked on its gone workers until the SIGKILL).

Measured here: 36.9 s and 42.9 s from the kill to nothing left, where the local backend takes about
1.3 s (held to 10 s by tests/runtime/test_delete_ends.py). Where the rest of the
half-minute goes on the node (the kubelet's pod teardown, the volume, the processes' own
exits) is not yet known: issue 38's 10 s is not met on the node.
"""

from __future__ import annotations

import time

import pytest
from k8s_integration import _tfk as kwok_tfk
from kubernetes.client.exceptions import ApiException

from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.protocol.progress import parse_line
from tests.helpers import execute_in_thread

from . import _tfk

pytestmark = pytest.mark.k8s_node

#: the grace is 60 s: a cluster whose every task ended on its notice is gone before it
#: (36.9 s and 42.9 s measured, the second beside a full CI run)
ENDED_WITHIN = 57.0


def test_every_pod_of_a_killed_parameter_server_cluster_is_gone_before_the_grace(
    k8s_node, node_api, node_ns, node_conn, local_volumes
) -> None:
    ctx, name, _models = _tfk.run_with_models_volume(local_volumes, node_ns)
    spec_data = _tfk.spec(
        node_ns,
        "parameter_server",
        workers=2,
        ps=1,
        args=["--tfk_steps", "1000000", "--tfk_checkpoint_every", "200", "--tfk_progress_every", "20"],
        storage={"models": {"size": "1Gi", "storage_class": "tfk-local"}},
        termination_grace_seconds=60,
    )
    op = _tfk.make_op(spec_data)
    thread, errors = execute_in_thread(op, ctx)

    def training() -> bool:
        pods = _tfk.pods(node_api, node_ns, name)
        chief = [p for p in pods if "-chief-" in p.metadata.name and p.status.phase == "Running"]
        if not chief:
            return False
        try:
            log = _tfk.pod_log(node_api, node_ns, chief[0].metadata.name)
        except ApiException:  # its container is still being created
            return False
        return any(parse_line(line) is not None for line in log.splitlines())  # the runtime's own lines

    try:
        _tfk.wait_for("the chief's first progress line", training, 240, every=1.0)
        assert len(_tfk.pods(node_api, node_ns, name)) == 4
    except BaseException:
        op.on_kill()  # nothing left running behind a failed wait
        thread.join(90)
        raise
    t0 = time.monotonic()
    op.on_kill()
    thread.join(90)
    assert not thread.is_alive()
    assert errors and isinstance(errors[0], TrainingFailed), errors
    kwok_tfk.wait_no_leftovers(node_api, node_ns, name, timeout=90)
    _tfk.container_processes_gone(k8s_node, 90)
    took = time.monotonic() - t0
    print(f"parameter_server cluster (chief, ps, 2 workers): nothing left {took:.1f}s after the kill")
    assert took < ENDED_WITHIN, f"{took:.1f}s: some task waited for its grace (60 s), not for its peers"
