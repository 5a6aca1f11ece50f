"""A killed parameter_server cluster on the real node ends on its tasks' notices, not on the
kubelet's SIGKILL.

A chief, a ps and two workers train the digits app with checkpoints in a models volume (so
the chief's notice path, drain then save, is the one taken), each pod with the default
termination grace of 60 s. The task is killed (``on_kill``, as a kill or a timeout of the
Airflow task does). The ps and the workers exit on their SIGTERM (143) within seconds; the
chief stops on its notice (76), before the grace, not at the kubelet's SIGKILL (137);
nothing of the cluster is left afterwards. Each task's exit and the total are printed.

Measured (four runs): ps and workers 0.9-1.5 s; the chief 35-56 s, so nothing left after
37-57 s, where the local backend ends the same cluster in about 1.3 s
(tests/runtime/test_delete_ends.py holds it to 10 s). On the node the chief's peer watch
sees the ps and workers gone late (once at its own bound, 5 s before the grace); why is
not yet known (its TCP and DNS probes of the peers' Service names are the suspects). Issue
38's 10 s is not met on the node.
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

#: the grace is 60 s; the chief's notice ends it 5 s before, and the kubelet's SIGKILL
#: would end it at 60 s: nothing is left before the grace and the teardown's few seconds
ENDED_WITHIN = 64.0
#: the ps and the workers end on their SIGTERM (exit 143): seconds, not the grace
SIGTERM_WITHIN = 10.0


def test_a_killed_parameter_server_cluster_ends_on_its_notices_not_the_sigkill(
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
    ended = _watch_exits(node_api, node_ns, name, t0)
    thread.join(90)
    assert not thread.is_alive()
    assert errors and isinstance(errors[0], TrainingFailed), errors
    kwok_tfk.wait_no_leftovers(node_api, node_ns, name, timeout=90)
    _tfk.container_processes_gone(k8s_node, 90)
    took = time.monotonic() - t0
    shown = ", ".join(f"{task} exit {code} at {at:.1f}s" for task, (code, at) in sorted(ended.items()))
    print(f"parameter_server cluster killed: {shown}; nothing left {took:.1f}s after the kill")
    # The ps and the workers end on their SIGTERM, within seconds.
    for task in ("ps-0", "worker-0", "worker-1"):
        assert task in ended and ended[task][1] < SIGTERM_WITHIN, (task, ended)
    # The chief ends itself (76: stopped on notice) before the kubelet's SIGKILL (137).
    assert ended.get("chief-0", (None,))[0] == 76, ended
    assert took < ENDED_WITHIN, f"{took:.1f}s: {shown}"


def _watch_exits(api, namespace: str, cluster: str, t0: float) -> dict[str, tuple[int, float]]:
    """Each task's container exit code and when it was first seen, until no pod is left."""
    ended: dict[str, tuple[int, float]] = {}
    while time.monotonic() - t0 < 120:
        pods = _tfk.pods(api, namespace, cluster)
        for pod in pods:
            task = pod.metadata.name.rsplit("-", 1)[0].split("-", 3)[-1]  # chief-0, ps-0, worker-1
            for c in pod.status.container_statuses or []:
                if c.state.terminated is not None and task not in ended:
                    ended[task] = (c.state.terminated.exit_code, time.monotonic() - t0)
        if not pods:
            break
        time.sleep(0.3)
    return ended
