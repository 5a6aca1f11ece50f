"""Kill-safety and reattach against the real API server, sync and deferrable.

- a retry (same task instance) reattaches: no second cluster, the same Job (uid);
- the waiting process killed (SIGKILL: nothing can clean up) and the task restarted ->
  it reattaches to the running cluster and finishes it;
- ``on_kill`` (mark failed), ``execution_timeout`` and ``dagrun_timeout`` leave zero
  objects with the cluster's label (Jobs, Services, PVCs, pods, EndpointSlices, the
  namespace), blocking and deferred.

How each kill reaches the provider (Airflow 3.3):
- blocking ``on_kill`` / ``dagrun_timeout``: the supervisor sends the task process SIGTERM;
  the task runner's handler calls ``on_kill``. Modelled by a real SIGTERM to a process
  running the operator under the same handler (``_tfk.OPERATOR_SCRIPT``).
- blocking ``execution_timeout``: the task runner's ``timeout()`` (SIGALRM) raises
  AirflowTaskTimeout inside ``execute``, then calls ``on_kill`` - done here the same way.
- deferred ``execution_timeout``: the trigger's own deadline -> a ``timeout`` event ->
  ``execute_complete`` deletes and raises AirflowTaskTimeout.
- deferred ``on_kill`` / ``dagrun_timeout``: the triggerer cancels the trigger and calls
  its ``on_kill``; modelled as exactly that.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferred
from kubernetes import client

from airflow_tfk.core.errors import TrainingFailed
from k8s_integration import _tfk
from tests.helpers import execute_in_thread

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

LONG = {"ps_grace_seconds": 1}


def _running(api, ns: str, name: str, tasks: int) -> None:
    # 60 s: for the operator started as a process, this also covers its Airflow import
    # (30 s was not enough at load ~27 on two cores).
    _tfk.wait_for(
        f"{tasks} running pods of {name}",
        lambda: len(p := _tfk.pods(api, ns, name)) == tasks and all(x.status.phase == "Running" for x in p),
        timeout=60,
    )


def _job_uid(api, ns: str, name: str) -> str:
    return client.BatchV1Api(api).read_namespaced_job(f"{name}-worker", ns).metadata.uid


def test_retry_reattaches_instead_of_creating_a_second_cluster(k8s_api, tfk_ns, tfk_conn, capfd) -> None:
    ctx = _tfk.task_context("manual__retry")
    name = _tfk.cluster_name(ctx)
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1)
    with pytest.raises(TaskDeferred):
        _tfk.make_op(tfk_ns, spec, deferrable=True).execute(ctx)  # try 1 dies while deferred
    _running(k8s_api, tfk_ns, name, 3)
    uid = _job_uid(k8s_api, tfk_ns, name)
    pods_before = {p.metadata.uid for p in _tfk.pods(k8s_api, tfk_ns, name)}

    ctx2 = _tfk.task_context("manual__retry", try_number=2)
    with _tfk.PodDriver(k8s_api, tfk_ns, name):
        assert _tfk.make_op(tfk_ns, spec).execute(ctx2)["outcome"] == "succeeded"
    assert "reattaching to existing cluster" in capfd.readouterr().out
    assert _job_uid(k8s_api, tfk_ns, name) == uid  # the same Job, not a second cluster
    jobs = client.BatchV1Api(k8s_api).list_namespaced_job(tfk_ns).items
    assert [j.metadata.name for j in jobs] == [f"{name}-worker"]
    workers = {p.metadata.uid for p in _tfk.pods(k8s_api, tfk_ns, name, "worker")}
    assert workers <= pods_before  # try 1's pods did the work; none were recreated


def test_killed_worker_process_restarted_reattaches(k8s_api, tfk_ns, tfk_conn) -> None:
    run_id = "manual__sigkill"
    name = _tfk.cluster_name(_tfk.task_context(run_id))
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1)
    proc = _tfk.start_operator_process(tfk_ns, run_id, spec)
    try:
        _running(k8s_api, tfk_ns, name, 3)
        uid = _job_uid(k8s_api, tfk_ns, name)
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)  # the worker dies; nothing can clean up
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = proc.stdout.read()
    assert "EXECUTING" in out and "RESULT" not in out, out[-2000:]
    assert _tfk.leftovers(k8s_api, tfk_ns, name)  # the cluster outlived its waiter

    restarted = _tfk.start_operator_process(tfk_ns, run_id, spec)
    with _tfk.PodDriver(k8s_api, tfk_ns, name):
        out, _ = restarted.communicate(timeout=90)
    assert restarted.returncode == 0, out[-3000:]
    assert "reattaching to existing cluster" in out and "RESULT" in out, out[-3000:]
    result = json.loads(out.split("RESULT ", 1)[1].splitlines()[0])
    assert result["outcome"] == "succeeded" and result["name"] == name
    assert _job_uid(k8s_api, tfk_ns, name) == uid


# -- blocking --------------------------------------------------------------------------------
def test_sync_on_kill_leaves_nothing(k8s_api, tfk_ns, tfk_conn) -> None:
    ctx = _tfk.task_context("manual__onkill")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        tfk_ns, _tfk.spec(tfk_ns, "parameter_server", workers=2, ps=1, evaluator={"replicas": 1})
    )
    thread, errors = execute_in_thread(op, ctx)
    _running(k8s_api, tfk_ns, name, 5)
    op.on_kill()
    thread.join(60)
    assert not thread.is_alive()
    assert errors and isinstance(errors[0], TrainingFailed), errors
    took = _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
    print(f"on_kill: no object left {took:.1f}s after the delete")


def test_sync_dagrun_timeout_sigterm_leaves_nothing(k8s_api, tfk_ns, tfk_conn) -> None:
    """dagrun_timeout (and mark-failed) of a running task: the supervisor's SIGTERM, the
    task runner's handler calls on_kill."""
    run_id = "manual__sigterm"
    name = _tfk.cluster_name(_tfk.task_context(run_id))
    proc = _tfk.start_operator_process(tfk_ns, run_id, _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1))
    try:
        _running(k8s_api, tfk_ns, name, 3)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "SIGTERM: on_kill" in out and "RESULT" not in out, out[-3000:]
    assert "TrainingFailed" in out, out[-3000:]
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_sync_execution_timeout_leaves_nothing(k8s_api, tfk_ns, tfk_conn) -> None:
    from airflow.sdk.execution_time.timeout import timeout

    ctx = _tfk.task_context("manual__timeout")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        tfk_ns, _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1), execution_timeout=timedelta(seconds=4)
    )
    with pytest.raises(AirflowTaskTimeout):
        try:  # what airflow.sdk.execution_time.task_runner._execute_task does
            with timeout(op.execution_timeout.total_seconds()):
                op.execute(ctx)
        except AirflowTaskTimeout:
            op.on_kill()
            raise
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


# -- deferred ---------------------------------------------------------------------------------
def _deferred(tfk_ns: str, run_id: str, **kwargs):
    ctx = _tfk.task_context(run_id)
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1), deferrable=True, **kwargs)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    path, trigger_kwargs = deferred.value.trigger.serialize()
    trigger = type(deferred.value.trigger)(**trigger_kwargs)  # as the triggerer builds it
    return ctx, op, deferred.value, trigger


def test_deferred_execution_timeout_leaves_nothing(k8s_api, tfk_ns, tfk_conn) -> None:
    ctx, op, deferred, trigger = _deferred(
        tfk_ns, "manual__deftimeout", execution_timeout=timedelta(seconds=4)
    )
    name = _tfk.cluster_name(ctx)

    async def first_event():
        async for event in trigger.run():
            return event.payload

    t0 = time.monotonic()
    event = asyncio.run(first_event())
    assert event["status"] == "timeout" and time.monotonic() - t0 < 15, event
    with pytest.raises(AirflowTaskTimeout):
        op.execute_complete(ctx, event, **deferred.kwargs)
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_deferred_on_kill_and_dagrun_timeout_leave_nothing(k8s_api, tfk_ns, tfk_conn) -> None:
    ctx, op, deferred, trigger = _deferred(tfk_ns, "manual__defkill")
    name = _tfk.cluster_name(ctx)

    async def killed_while_waiting():
        task = asyncio.create_task(_first(trigger))
        await asyncio.to_thread(_running, k8s_api, tfk_ns, name, 3)
        await asyncio.sleep(0.5)
        assert not task.done()
        task.cancel()  # the triggerer cancels the trigger, then calls its on_kill
        await trigger.on_kill()

    asyncio.run(killed_while_waiting())
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


async def _first(trigger):
    async for event in trigger.run():
        return event


def test_retry_replaces_a_failed_cluster_and_ignores_its_stale_pods(k8s_api, tfk_ns, tfk_conn, capfd) -> None:
    """Try 1 dies while deferred and its training then fails (worker-1, permanent code):
    the retry deletes that cluster and creates a new one, and is not fooled by the old
    failed pods the garbage collector has not removed yet."""
    from k8s import harness

    from airflow_tfk.core import naming

    ctx = _tfk.task_context("manual__replace")
    name = _tfk.cluster_name(ctx)
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1, permanent_exit_codes=[3])
    with pytest.raises(TaskDeferred):
        _tfk.make_op(tfk_ns, spec, deferrable=True).execute(ctx)
    _running(k8s_api, tfk_ns, name, 3)
    old_uid = _job_uid(k8s_api, tfk_ns, name)
    _tfk.finish(k8s_api, tfk_ns, name, "worker", code=3, indexes=[1])
    _tfk.wait_for(
        "the old worker-1 pod failed",
        lambda: any(p.status.phase == "Failed" for p in _tfk.pods(k8s_api, tfk_ns, name, "worker")),
    )

    def fresh_pods_succeed(pod):
        owner = (pod.metadata.owner_references or [None])[0]
        if (
            pod.metadata.labels.get(naming.LABEL_ROLE) == "worker"
            and owner is not None
            and owner.uid != old_uid
        ):
            return {harness.EXIT_CODE: "0", harness.EXIT_DELAY: "1s"}
        return None

    ctx2 = _tfk.task_context("manual__replace", try_number=2)
    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=fresh_pods_succeed):
        result = _tfk.make_op(tfk_ns, spec).execute(ctx2)
    assert result["outcome"] == "succeeded"
    out = capfd.readouterr().out
    assert "replacing failed cluster" in out and "task worker-1 failed (ExitCode, exit code 3)" in out
    assert _job_uid(k8s_api, tfk_ns, name) != old_uid
