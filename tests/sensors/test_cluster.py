"""TFClusterSensor on the local backend, with the create and clean-up operators around it:
the step-by-step form of what TFTrainingOperator does in one task."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core import naming
from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.core.status import Phase
from airflow_tfk.operators.cluster import (
    TFCreateClusterOperator,
    TFDeleteClusterOperator,
    TFDeleteParameterServersOperator,
)
from airflow_tfk.sensors.cluster import TFClusterSensor
from tests.helpers import assert_no_processes, spec_dict, task_context


def create(spec: dict, run_id: str = "manual__1") -> dict:
    op = TFCreateClusterOperator(task_id="create", backend="local", cluster_spec=spec)
    return op.execute(task_context(run_id, task_id="create"))


def poke_until_done(sensor: TFClusterSensor, ctx: dict, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not sensor.poke(ctx):
        assert time.monotonic() < deadline, "sensor never succeeded"
        time.sleep(0.2)


def test_create_sense_cleanup_delete(local_root, capfd) -> None:
    handle = create(spec_dict("between_graph", workers=2, STEPS="4"))
    assert handle["backend"] == "local"
    assert handle["label_selector"] == f"{naming.LABEL_CLUSTER}={handle['name']},{naming.MANAGED_SELECTOR}"
    ref = ClusterRef(handle["name"], handle["namespace"])
    ctx = task_context(task_id="wait")
    poke_until_done(TFClusterSensor(task_id="wait", cluster=handle, progress_interval=0.1), ctx)
    assert "step 4/4 (100.0%)" in capfd.readouterr().out
    deleted = TFDeleteParameterServersOperator(task_id="cleanup", cluster=handle).execute(ctx)
    assert deleted == ["ps"]
    backend = LocalBackend(str(local_root))
    assert backend.status(ref).task("ps", 0).reason == "Deleted"
    TFDeleteClusterOperator(task_id="delete", cluster=handle).execute(ctx)
    assert not backend.exists(ref)
    assert_no_processes(local_root)


def test_sensor_fails_with_the_task_reason(local_root) -> None:
    spec = spec_dict("all_reduce", workers=2, STEPS="1", EXIT_CODE_0="1")
    handle = create(spec)
    sensor = TFClusterSensor(task_id="wait", cluster=handle)
    with pytest.raises(TrainingFailed) as err:
        poke_until_done(sensor, task_context(task_id="wait"))
    assert err.value.task == "worker-0" and err.value.reason == "ExitCode"
    TFDeleteClusterOperator(task_id="delete", cluster=handle).execute(task_context())
    assert_no_processes(local_root)


def test_deferrable_sensor_waits_in_the_trigger(local_root) -> None:
    handle = create(spec_dict("parameter_server", workers=1, STEPS="3"))
    sensor = TFClusterSensor(task_id="wait", cluster=handle, deferrable=True)
    ctx = task_context(task_id="wait")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(ctx)

    async def first():
        async for event in deferred.value.trigger.run():
            return event.payload

    event = asyncio.run(first())
    assert event["status"] == "success"
    sensor.execute_complete(ctx, event)  # success: no exception
    status = LocalBackend(str(local_root)).status(ClusterRef(handle["name"], handle["namespace"]))
    assert status.task("chief", 0).phase is Phase.SUCCEEDED
    TFDeleteClusterOperator(task_id="delete", cluster=handle).execute(ctx)
    assert_no_processes(local_root)


def test_deferrable_sensor_can_release_the_ps_from_the_trigger(local_root) -> None:
    """A paused DAG resumes neither the sensor nor the clean-up task after it: with
    release_parameter_servers the trigger ends the PS itself, and the clean-up task, when it
    runs, finds nothing left to end."""
    handle = create(spec_dict("between_graph", workers=2, STEPS="3"))
    ref = ClusterRef(handle["name"], handle["namespace"])
    sensor = TFClusterSensor(task_id="wait", cluster=handle, deferrable=True, release_parameter_servers=True)
    ctx = task_context(task_id="wait")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(ctx)
    trigger = type(deferred.value.trigger)(**deferred.value.trigger.serialize()[1])

    async def first():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(first())
    assert event["status"] == "success" and event["released"] == ["ps"]
    backend = LocalBackend(str(local_root))
    assert backend.status(ref).task("ps", 0).reason == "Deleted"
    assert_no_processes(local_root)  # the workers finished, the PS were ended: nothing runs
    sensor.execute_complete(ctx, event)
    assert TFDeleteParameterServersOperator(task_id="cleanup", cluster=handle).execute(ctx) == ["ps"]
    TFDeleteClusterOperator(task_id="delete", cluster=handle).execute(ctx)
    assert not backend.exists(ref)
    with pytest.raises(ValueError, match="release_parameter_servers"):
        TFClusterSensor(task_id="w", cluster=handle, release_parameter_servers="yes")


def test_failed_event_becomes_training_failed() -> None:
    sensor = TFClusterSensor(task_id="wait", cluster={}, deferrable=True)
    event = {
        "status": "failed",
        "message": "task worker-1 failed (OOMKilled, exit code 137)",
        "cluster": {"name": "c", "namespace": "default"},
        "failed_task": {
            "role": "worker",
            "index": 1,
            "phase": "Failed",
            "reason": "OOMKilled",
            "message": "",
            "exit_code": 137,
            "restarts": 0,
        },
    }
    with pytest.raises(TrainingFailed, match="worker-1 failed .*OOMKilled"):
        sensor.execute_complete(task_context(), event)


def test_delete_without_cluster_deletes_nothing_and_says_so(local_root, monkeypatch, capfd) -> None:
    """No handle (the create task failed before it made one): no backend is built, no
    cluster under the root is touched, and the log says why nothing happened."""
    from airflow_tfk.run import handle as handles

    live = ClusterRef("tfk-live", "default")
    backend = LocalBackend(root=str(local_root))
    made: list[object] = []
    monkeypatch.setattr(handles.ClusterHandle, "backend", lambda self: made.append(self) or backend)
    (local_root / "default" / live.name).mkdir(parents=True)
    TFDeleteClusterOperator(task_id="delete", cluster=None).execute(task_context())
    assert made == []  # no handle, no backend
    assert (local_root / "default" / live.name).is_dir()
    out, err = capfd.readouterr()
    assert "no cluster was created; nothing to delete" in out + err
