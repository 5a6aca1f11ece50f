"""Issue 10's fault suite on the real API server (KWOK nodes): what is left after the
process waiting on a cluster is SIGKILLed, and what a retry does once the cluster's
deadline has passed.

- SIGKILLed waiter, then the sweeper: the sweeper operator, told the task instance
  failed, deletes the cluster; nothing with its label is left.
- A retry after the deadline of an unfinished training: the Jobs failed with
  DeadlineExceeded, so the retry deletes that cluster and starts afresh (a new Job), never
  reattaching to it.
- A retry after the deadline of a finished training (the workers succeeded, the waiter
  died in the grace period, the sweeper stopped the PS): the retry reattaches to the
  succeeded training and does not train again (the same Job, no new pods).
- No Airflow at all: a cluster nobody waits on or sweeps; the control plane ends its
  parameter servers at the deadline (the PS Job's activeDeadlineSeconds).

The only stand-in is Airflow's answer to "what state is this task instance in"
(``ti.get_task_states``, a call to Airflow's execution API), given by the test.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from types import SimpleNamespace

import pytest
from kubernetes import client

from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures


def _ti(state: str):
    """Airflow's execution API, answering ``state`` for every task instance asked about."""

    def get_task_states(*, dag_id, task_ids, run_ids, map_index=None):
        return {run_id: {task: state for task in task_ids} for run_id in run_ids}

    return SimpleNamespace(get_task_states=get_task_states)


def _sweep(ns: str, state: str) -> list[dict]:
    from airflow_tfk.operators.sweeper import TFSweepOrphansOperator

    op = TFSweepOrphansOperator(
        task_id="sweep", backend="kubernetes", kubernetes_conn_id=_tfk.CONN_ID, namespace=ns
    )
    return op.execute({"ti": _ti(state)})


class Lines:
    """The operator process's output, read by a thread, so a test can wait for a line."""

    def __init__(self, proc) -> None:
        self.proc, self.seen, self._q = proc, [], queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._q.put(line)

    def wait(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.seen):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {text!r} in the operator's output: {''.join(self.seen)[-3000:]}")
            try:
                self.seen.append(self._q.get(timeout=left))
            except queue.Empty:
                continue


def _sigkill(proc) -> None:
    proc.send_signal(signal.SIGKILL)  # no on_kill, no finally: nothing cleans up
    proc.wait(10)


def _job(api, ns: str, name: str) -> client.V1Job:
    return client.BatchV1Api(api).read_namespaced_job(f"{name}-worker", ns)


def _running(api, ns: str, name: str, tasks: int) -> None:
    _tfk.wait_for(
        f"{tasks} running pods of {name}",
        lambda: len(p := _tfk.pods(api, ns, name)) == tasks and all(x.status.phase == "Running" for x in p),
        timeout=60,
    )


def test_sigkilled_waiter_then_the_sweeper_leaves_nothing(k8s_api, tfk_ns, tfk_conn) -> None:
    run_id = "manual__orphan"
    name = _tfk.cluster_name(_tfk.task_context(run_id))
    proc = _tfk.start_operator_process(tfk_ns, run_id, _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1))
    try:
        _running(k8s_api, tfk_ns, name, 3)
    finally:
        _sigkill(proc)
    time.sleep(1)
    assert _tfk.leftovers(k8s_api, tfk_ns, name)  # the cluster outlived its waiter
    assert _sweep(tfk_ns, "running") == []  # its owner still runs (a restarted worker): kept
    swept = _sweep(tfk_ns, "failed")
    assert [(s["name"], s["deleted"]) for s in swept] == [(name, True)], swept
    assert "is failed" in swept[0]["reason"]
    took = _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
    print(f"sweeper: nothing left {took:.1f}s after the sweep")


def test_retry_after_the_deadline_of_an_unfinished_training_starts_afresh(
    k8s_api, tfk_ns, tfk_conn, capfd
) -> None:
    run_id = "manual__expired"
    name = _tfk.cluster_name(_tfk.task_context(run_id))
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1, max_duration_seconds=8)
    proc = _tfk.start_operator_process(tfk_ns, run_id, spec)
    try:
        _running(k8s_api, tfk_ns, name, 3)
    finally:
        _sigkill(proc)  # the workers never finish: the deadline will hit them
    old = _job(k8s_api, tfk_ns, name)
    _tfk.wait_for(
        "the worker Job failed with DeadlineExceeded",
        lambda: any(
            c.type == "Failed" and c.reason == "DeadlineExceeded"
            for c in _job(k8s_api, tfk_ns, name).status.conditions or []
        ),
        timeout=60,
    )
    with _tfk.PodDriver(k8s_api, tfk_ns, name):
        result = _tfk.make_op(tfk_ns, spec).execute(_tfk.task_context(run_id, try_number=2))
    out = capfd.readouterr().out
    assert result["outcome"] == "succeeded"
    assert "replacing failed cluster" in out and "reattaching" not in out, out[-3000:]
    assert _job(k8s_api, tfk_ns, name).metadata.uid != old.metadata.uid  # a new cluster
    # and its PS deleted after success (the garbage collector removes the pods a moment
    # after the PS Job: wait for it, as CI once saw the pod still listed)
    _tfk.wait_for("the PS pods gone", lambda: not _tfk.pods(k8s_api, tfk_ns, name, "ps"), timeout=30)


def test_retry_after_the_deadline_of_a_finished_training_does_not_retrain(
    k8s_api, tfk_ns, tfk_conn, capfd
) -> None:
    run_id = "manual__finished"
    name = _tfk.cluster_name(_tfk.task_context(run_id))
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1, ps_grace_seconds=8, max_duration_seconds=3600)
    proc = _tfk.start_operator_process(tfk_ns, run_id, spec)
    lines = Lines(proc)
    try:
        with _tfk.PodDriver(k8s_api, tfk_ns, name):
            # The countdown is what is left of the 8 s grace after the log copy (7 s when
            # the copy took a while), so only its start is matched.
            lines.wait("training succeeded; deleting ps in ")
    finally:
        _sigkill(proc)  # dies in the grace period: the PS runs on
    uid = _job(k8s_api, tfk_ns, name).metadata.uid
    workers = {p.metadata.uid for p in _tfk.pods(k8s_api, tfk_ns, name, "worker")}
    assert _tfk.pods(k8s_api, tfk_ns, name, "ps")
    # The task is up for retry; the deadline has passed (as seen an hour later).
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.run.orphans import sweep

    swept = sweep(KubernetesBackend(_tfk.CONN_ID), tfk_ns, lambda i: "up_for_retry", now=time.time() + 3601)
    assert [s.ref.name for s in swept] == [name] and "deadline" in swept[0].reason
    _tfk.wait_for("the PS deleted", lambda: not _tfk.pods(k8s_api, tfk_ns, name, "ps"), timeout=30)

    with _tfk.PodDriver(k8s_api, tfk_ns, name):  # had it retrained, the retry would finish too
        result = _tfk.make_op(tfk_ns, spec).execute(_tfk.task_context(run_id, try_number=2))
    out = capfd.readouterr().out
    assert result["outcome"] == "succeeded"
    assert "reattaching to existing cluster" in out and "creating cluster" not in out, out[-3000:]
    assert _job(k8s_api, tfk_ns, name).metadata.uid == uid  # no second training
    assert {p.metadata.uid for p in _tfk.pods(k8s_api, tfk_ns, name, "worker")} == workers


def test_the_ps_job_is_stopped_at_its_deadline_by_the_cluster_itself(k8s_api, tfk_ns, tfk_conn) -> None:
    """Nothing of Airflow: the cluster is created and nobody ever waits on it or sweeps
    it. The control plane alone ends the parameter servers at max_duration_seconds (the
    PS Job's activeDeadlineSeconds; as a StatefulSet they ran until the sweeper came)."""
    from airflow_tfk.backends.base import ClusterRef
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.spec.cluster import TFClusterSpec

    spec = TFClusterSpec.from_dict(
        _tfk.spec(tfk_ns, "between_graph", workers=1, ps=2, name="ps-deadline", max_duration_seconds=5)
    )
    KubernetesBackend(_tfk.CONN_ID).create(spec)
    batch = client.BatchV1Api(k8s_api)
    ps_job = batch.read_namespaced_job("ps-deadline-ps", tfk_ns)
    assert ps_job.spec.active_deadline_seconds == 5 and ps_job.spec.completions == 2
    _running(k8s_api, tfk_ns, spec.name, 3)
    hostnames = sorted(p.spec.hostname for p in _tfk.pods(k8s_api, tfk_ns, spec.name, "ps"))
    assert hostnames == ["ps-deadline-ps-0", "ps-deadline-ps-1"]  # the StatefulSet's names
    assert {p.spec.subdomain for p in _tfk.pods(k8s_api, tfk_ns, spec.name, "ps")} == {"ps-deadline-ps"}
    t0 = time.monotonic()

    def failed_at_deadline():
        job = batch.read_namespaced_job("ps-deadline-ps", tfk_ns)
        return [c for c in job.status.conditions or [] if c.type == "Failed" and c.status == "True"]

    (cond,) = _tfk.wait_for("the PS Job failed at its deadline", failed_at_deadline, timeout=60)
    assert cond.reason == "DeadlineExceeded", cond
    _tfk.wait_for("the PS pods gone", lambda: not _tfk.pods(k8s_api, tfk_ns, spec.name, "ps"), timeout=60)
    _tfk.wait_for("no pod left", lambda: not _tfk.pods(k8s_api, tfk_ns, spec.name), timeout=60)
    print(f"PS Job: DeadlineExceeded and its pods gone {time.monotonic() - t0:.1f}s after all ran")
    KubernetesBackend(_tfk.CONN_ID).delete(ClusterRef(spec.name, tfk_ns))
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, spec.name)
