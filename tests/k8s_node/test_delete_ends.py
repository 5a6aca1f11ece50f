"""Ending a running parameter_server cluster on the real node takes seconds, not the grace.

A chief, a ps and two workers train the digits app with checkpoints in a models volume (so
the chief's notice path, drain then save, is the one taken), each pod with the default
termination grace of 60 s. The task is killed (``on_kill``, as a kill or a timeout of the
Airflow task does): every pod is gone and no container process is left on the node within
10 s. Before the runtime watched its peers after the notice, the chief sat in a call to the
gone workers until the kubelet's SIGKILL at 60 s (tests/runtime/test_delete_ends.py holds
the local backend to the same bound).
"""

from __future__ import annotations

import time

import pytest
from k8s_integration import _tfk as kwok_tfk

from airflow_tfk.core.errors import TrainingFailed
from tests.helpers import execute_in_thread

from . import _tfk

pytestmark = pytest.mark.k8s_node

ENDED_WITHIN = 10.0


def test_every_pod_of_a_killed_parameter_server_cluster_is_gone_within_10s(
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
        chief = [p for p in _tfk.pods(node_api, node_ns, name) if "-chief-" in p.metadata.name]
        return bool(chief) and bool(
            _tfk.progress_lines(_tfk.pod_log(node_api, node_ns, chief[0].metadata.name))
        )

    _tfk.wait_for("the chief's first progress line", training, 240, every=1.0)
    assert len(_tfk.pods(node_api, node_ns, name)) == 4
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
