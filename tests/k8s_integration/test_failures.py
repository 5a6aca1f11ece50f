"""Failures fail fast with the pod's own reason, against the real Job controller:

- a worker exits with a permanent exit code -> podFailurePolicy FailIndex -> the training
  fails naming that task and code (seconds, not a timeout); a transient code is retried;
- a pod stuck Unschedulable, or in ImagePullBackOff, past the backend's (small) timeout
  -> the training fails with that reason;
- a worker killed for memory (OOMKilled, exit code 137) -> the same failure, in the same
  words, through the blocking wait and the deferrable one.

Every failure deletes the cluster: nothing with its label is left.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from k8s import harness

from airflow_tfk.core import naming
from airflow_tfk.core.errors import TrainingFailed
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures


def test_permanent_exit_code_fails_fast_naming_task_and_code(k8s_api, tfk_ns, tfk_conn) -> None:
    ctx = _tfk.task_context("manual__exit3")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        tfk_ns,
        _tfk.spec(tfk_ns, "between_graph", workers=3, ps=1, retries_per_index=2, permanent_exit_codes=[3]),
    )
    failed_at: list[float] = []

    def rule(pod):
        if pod.metadata.labels.get(naming.LABEL_ROLE) != "worker" or pod.status.phase != "Running":
            return None
        if _tfk.index_of(pod) == 1:
            failed_at.append(time.time())
            return {harness.EXIT_CODE: "3", harness.EXIT_MESSAGE: "bad input file"}
        return None  # the others keep training

    t0 = time.monotonic()
    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=rule), pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    raised = time.time()
    assert err.value.task == "worker-1", err.value
    assert "exit code 3" in str(err.value) and "bad input file" in str(err.value)
    # Fast: the first failure ends it, no retry of a permanent code, no timeout.
    assert raised - failed_at[0] < 10, raised - failed_at[0]
    assert time.monotonic() - t0 < 30
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_transient_exit_code_is_retried_then_succeeds(k8s_api, tfk_ns, tfk_conn) -> None:
    """Exit code 75 is not permanent: the Job controller retries the index (within
    retries_per_index) and the training still succeeds."""
    ctx = _tfk.task_context("manual__exit75")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        tfk_ns, _tfk.spec(tfk_ns, "all_reduce", workers=2, ps=0, retries_per_index=1), cleanup="all"
    )
    seen: dict[int, int] = {}

    def rule(pod):
        if pod.status.phase != "Running":
            return None
        i = _tfk.index_of(pod)
        seen[i] = seen.get(i, 0) + 1
        code = "75" if i == 0 and seen[i] == 1 else "0"
        return {harness.EXIT_CODE: code}

    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=rule):
        assert op.execute(ctx)["outcome"] == "succeeded"
    assert seen[0] == 2 and seen[1] == 1  # index 0 ran twice
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_unschedulable_fails_with_that_reason(k8s_api, tfk_ns, tfk_conn) -> None:
    ctx = _tfk.task_context("manual__nowhere")
    name = _tfk.cluster_name(ctx)
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1)
    spec["worker"]["node_selector"] = dict(harness.UNSCHEDULABLE_NODE_SELECTOR)
    op = _tfk.make_op(tfk_ns, spec, backend_config={"unschedulable_timeout": 3})
    t0 = time.monotonic()
    with pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    took = time.monotonic() - t0
    assert err.value.task.startswith("worker-") and err.value.reason == "Unschedulable", err.value
    assert "node affinity/selector" in str(err.value)  # the scheduler's own message
    assert 3 <= took < 20, took
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_image_pull_backoff_fails_with_that_reason(k8s_cluster, k8s_api, tfk_ns, tfk_conn) -> None:
    """KWOK's stage turns a pod annotated before it is scheduled into a real
    ImagePullBackOff status. The workers target a node pool that appears only after their
    pods were annotated; the PS run normally."""
    ctx = _tfk.task_context("manual__pull")
    name = _tfk.cluster_name(ctx)
    pool = f"pull-{uuid.uuid4().hex[:6]}"
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1)
    spec["worker"]["node_selector"] = {"kwok.tfk.test/pool": pool}
    op = _tfk.make_op(tfk_ns, spec, backend_config={"image_pull_timeout": 3, "unschedulable_timeout": 600})
    errors: list[BaseException] = []

    def pull_fails() -> None:
        try:
            names = _tfk.wait_for(
                "unscheduled worker pods",
                lambda: (
                    len(p := _tfk.pods(k8s_api, tfk_ns, name, "worker")) == 2 and [x.metadata.name for x in p]
                ),
                timeout=30,
            )
            for pod in names:
                _tfk.annotate(
                    k8s_api,
                    tfk_ns,
                    pod,
                    {
                        harness.WAITING_REASON: "ImagePullBackOff",
                        harness.EXIT_MESSAGE: f'Back-off pulling image "{_tfk.IMAGE}"',
                    },
                )
            k8s_cluster.add_node(f"kwok-{pool}", labels={"kwok.tfk.test/pool": pool})
        except BaseException as exc:
            errors.append(exc)

    helper = threading.Thread(target=pull_fails)
    helper.start()
    t0 = time.monotonic()
    with pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    took = time.monotonic() - t0
    helper.join(30)
    assert not errors, errors
    assert err.value.task.startswith("worker-") and err.value.reason == "ImagePullBackOff", err.value
    assert "Back-off pulling image" in str(err.value)
    assert took < 30, took
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


#: The whole verdict of an OOMKilled worker: reason, exit code, and the backend's words
#: for it (this pod has no termination message of its own).
OOM_MESSAGE = "task worker-1 failed (OOMKilled, exit code 137): the container exceeded its memory limit"


def test_oomkilled_is_the_same_failure_through_the_blocking_and_the_deferrable_wait(
    k8s_api, tfk_ns, tfk_conn, monkeypatch
) -> None:
    """A worker killed for memory fails the training with reason OOMKilled and exit code
    137, in the same words whether the blocking wait (the operator's ``wait_for_cluster``:
    the wait on an event loop of its own) or the deferrable one (the trigger's
    ``Wait.run`` awaited) sees it. Both wait on the cluster at the same time, so each sees
    the Jobs change through its own watch, not a fresh list.

    These assertions were in the HTTP double's async test until session 4 deleted it;
    KWOK now writes the pod's real OOMKilled status (exit code 137, reason annotation)."""
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.backends.kubernetes.watch import WatchSession
    from airflow_tfk.core.naming import RunIdentity
    from airflow_tfk.run.policies import Outcome
    from airflow_tfk.run.wait import Wait, failure_of, wait_for_cluster, wait_result
    from airflow_tfk.spec.cluster import Mode, TFClusterSpec

    spec = TFClusterSpec.from_dict(_tfk.spec(tfk_ns, "between_graph", workers=2, ps=1, name="oom"))
    ref = KubernetesBackend(conn_id=tfk_conn).create(spec, RunIdentity("k8s_it", "train", "manual__oom", -1))
    replicas = {"ps": 1, "worker": 2}
    _tfk.wait_for(
        "3 running pods",
        lambda: [p.status.phase for p in _tfk.pods(k8s_api, tfk_ns, "oom")] == ["Running"] * 3,
    )
    lines: dict[str, list[str]] = {"blocking": [], "deferrable": []}
    verdicts: dict[str, Any] = {}
    backends = {how: KubernetesBackend(conn_id=tfk_conn) for how in lines}

    def blocking() -> None:
        verdicts["blocking"] = wait_for_cluster(
            backends["blocking"],
            ref,
            Mode.BETWEEN_GRAPH,
            replicas,
            timeout=60,
            progress_interval=3600,  # KWOK pods have no logs to read
            emit=lines["blocking"].append,
        )

    def deferrable() -> None:
        wait = Wait(
            backends["deferrable"],
            ref,
            Mode.BETWEEN_GRAPH,
            replicas,
            deadline=time.time() + 60,
            progress_interval=3600,
            emit=lines["deferrable"].append,
        )
        verdicts["deferrable"] = asyncio.run(wait.run())

    def both_say(summary: str) -> bool:
        return all(f"cluster: {summary}" in said for said in lines.values())

    # Job events each wait applied: each runs its event loop in a thread named for it.
    events = dict.fromkeys(lines, 0)
    on_event = WatchSession.on_event

    def counted(session: WatchSession, event: dict[str, Any]) -> bool:
        changed = on_event(session, event)
        events[threading.current_thread().name] += changed
        return changed

    monkeypatch.setattr(WatchSession, "on_event", counted)
    waiters = [threading.Thread(target=fn, name=fn.__name__) for fn in (blocking, deferrable)]
    for w in waiters:
        w.start()
    try:
        _tfk.wait_for("both waits watching", lambda: both_say("ps 1 running; worker 2 running"), timeout=30)
        _tfk.finish(k8s_api, tfk_ns, "oom", "worker", 0, indexes=[0])
        _tfk.wait_for("worker 0 done", lambda: both_say("ps 1 running; worker 1 running, 1 succeeded"))
        (victim,) = [
            p.metadata.name for p in _tfk.pods(k8s_api, tfk_ns, "oom", "worker") if _tfk.index_of(p) == 1
        ]
        _tfk.annotate(k8s_api, tfk_ns, victim, {harness.EXIT_CODE: "137", harness.EXIT_REASON: "OOMKilled"})
    finally:
        for w in waiters:
            w.join(90)
    assert set(verdicts) == {"blocking", "deferrable"}, (verdicts, lines)
    for how, verdict in verdicts.items():
        assert verdict.outcome is Outcome.FAILED, (how, verdict)
        task = verdict.failed_task
        assert (task.name, task.reason, task.exit_code) == ("worker-1", "OOMKilled", 137), (how, task)
        assert verdict.message == OOM_MESSAGE, (how, verdict.message)
        assert lines[how][-1] == "cluster: ps 1 running; worker 1 failed, 1 succeeded", (how, lines[how])
        # Each saw the two workers change through its own Job watch (events applied), not
        # only through lists.
        assert events[how] >= 2, (how, events)
    # The two drivers are one loop: the same summaries in the same order, the same event
    # payload, the same exception for the task.
    assert lines["blocking"] == lines["deferrable"], lines
    results = {how: wait_result(v) for how, v in verdicts.items()}
    assert results["blocking"] == results["deferrable"], results
    errors = {how: failure_of(r, "oom") for how, r in results.items()}
    assert all(isinstance(e, TrainingFailed) for e in errors.values()), errors
    assert str(errors["blocking"]) == str(errors["deferrable"]), errors
    KubernetesBackend(conn_id=tfk_conn).delete(ref)
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, "oom")
