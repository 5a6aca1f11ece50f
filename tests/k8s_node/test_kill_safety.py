"""Kill-safety on the real node: on_kill, execution_timeout (blocking and deferred) and a
SIGKILLed waiter that is restarted leave zero pods and no container process on the node.
The time from the kill until the node runs nothing of the cluster is printed."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferred
from k8s_integration import _tfk as kwok_tfk

from airflow_tfk.core.errors import TrainingFailed
from tests.helpers import execute_in_thread

from . import _tfk

pytestmark = pytest.mark.k8s_node

# Long enough to be killed while it runs.
_LONG = ["--tfk_steps", "100000", "--tfk_checkpoint_every", "0"]


def _running(api, ns: str, name: str, count: int) -> None:
    def ok() -> bool:
        ps = _tfk.pods(api, ns, name)
        return len(ps) >= count and all(p.status.phase == "Running" for p in ps)

    _tfk.wait_for(f"{count} Running pods of {name}", ok, 240, every=0.5)


def _gone(k8s_node, api, ns: str, name: str, t0: float, what: str) -> float:
    kwok_tfk.wait_no_leftovers(api, ns, name, timeout=90)
    _tfk.container_processes_gone(k8s_node, 90)
    took = time.monotonic() - t0
    print(f"{what}: zero pods and no container process {took:.1f}s after the kill")
    return took


def test_on_kill_leaves_no_pod_and_no_container(k8s_node, node_api, node_ns, node_conn) -> None:
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(_tfk.spec(node_ns, "between_graph", workers=2, ps=1, args=_LONG))
    thread, errors = execute_in_thread(op, ctx)
    _running(node_api, node_ns, name, 3)
    t0 = time.monotonic()
    op.on_kill()
    thread.join(90)
    assert not thread.is_alive()
    assert errors and isinstance(errors[0], TrainingFailed), errors
    took = _gone(k8s_node, node_api, node_ns, name, t0, "on_kill (1 PS, 2 workers)")
    assert took < 30, took  # the PS stop at SIGTERM (shared PID namespace), not at SIGKILL


def test_execution_timeout_blocking_leaves_nothing(k8s_node, node_api, node_ns, node_conn) -> None:
    from airflow.sdk.execution_time.timeout import timeout

    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        _tfk.spec(node_ns, "all_reduce", workers=2, args=_LONG), execution_timeout=timedelta(seconds=25)
    )
    with pytest.raises(AirflowTaskTimeout):
        try:  # what airflow.sdk.execution_time.task_runner._execute_task does
            with timeout(op.execution_timeout.total_seconds()):
                op.execute(ctx)
        except AirflowTaskTimeout:
            t0 = time.monotonic()
            op.on_kill()
            raise
    _gone(k8s_node, node_api, node_ns, name, t0, "blocking execution_timeout")


def test_execution_timeout_deferred_leaves_nothing(k8s_node, node_api, node_ns, node_conn) -> None:
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        _tfk.spec(node_ns, "all_reduce", workers=2, args=_LONG),
        deferrable=True,
        execution_timeout=timedelta(seconds=25),
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    _path, kwargs = deferred.value.trigger.serialize()
    trigger = type(deferred.value.trigger)(**kwargs)  # as the triggerer builds it

    async def first_event():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(first_event())
    assert event["status"] == "timeout", event
    t0 = time.monotonic()
    with pytest.raises(AirflowTaskTimeout):
        op.execute_complete(ctx, event, **deferred.value.kwargs)
    _gone(k8s_node, node_api, node_ns, name, t0, "deferred execution_timeout")


def test_sigkilled_waiter_restarted_reattaches_then_sigterm_leaves_nothing(
    k8s_node, node_api, node_ns, node_conn
) -> None:
    run_id = f"manual__{uuid.uuid4().hex[:8]}"
    name = _tfk.cluster_name(_tfk.task_context(run_id))
    spec_data = _tfk.spec(node_ns, "between_graph", workers=2, ps=1, args=_LONG)
    first = kwok_tfk.start_operator_process(node_ns, run_id, spec_data)
    try:
        _running(node_api, node_ns, name, 3)
        first.kill()  # SIGKILL: no on_kill, the cluster stays
        first.communicate(timeout=30)
        uids = {p.metadata.uid for p in _tfk.pods(node_api, node_ns, name)}
        assert len(uids) == 3
        second = kwok_tfk.start_operator_process(node_ns, run_id, spec_data)
        try:
            assert second.stdout is not None
            head = ""
            while "EXECUTING" not in head:  # its SIGTERM handler is installed from here on
                line = second.stdout.readline()
                assert line, head
                head += line
            time.sleep(5)  # it reattaches (same pods) and waits
            assert {p.metadata.uid for p in _tfk.pods(node_api, node_ns, name)} == uids
            t0 = time.monotonic()
            second.send_signal(signal.SIGTERM)
            out, _ = second.communicate(timeout=90)
            out = head + out
        finally:
            if second.poll() is None:
                second.kill()
    finally:
        if first.poll() is None:
            first.kill()
    assert "reattaching to existing cluster" in out and "SIGTERM: on_kill" in out, out[-3000:]
    _gone(k8s_node, node_api, node_ns, name, t0, "SIGKILL + restart + SIGTERM")
