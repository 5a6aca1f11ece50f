"""TFTrainingOperator on the local backend: real processes, real Airflow operator code.

The Airflow context is reduced to the task-instance identity the operator reads; the
deferrable path runs the real trigger in an asyncio loop, as the triggerer would. The
full `airflow dags test` runs are in tests/e2e.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from airflow.sdk.exceptions import AirflowSkipException, AirflowTaskTimeout, TaskDeferred

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.errors import LocalMachineError, SpecError, TrainingFailed
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.core.status import Phase
from airflow_tfk.operators.training import TFTrainingOperator
from tests.helpers import (
    assert_no_processes,
    cluster_processes,
    execute_in_thread,
    local_state,
    spec_dict,
    task_context,
    wait_for,
)


def make_op(spec: dict, **kwargs) -> TFTrainingOperator:
    kwargs.setdefault("progress_interval", 0.2)
    return TFTrainingOperator(task_id="train", backend="local", cluster_spec=spec, **kwargs)


def cluster_of(ctx: dict) -> ClusterRef:
    ti = ctx["ti"]
    return ClusterRef(RunIdentity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index).cluster_name(), "default")


def test_between_graph_success_deletes_ps_and_logs_progress(local_root, capfd) -> None:
    ctx = task_context()
    op = make_op(spec_dict("between_graph", workers=2, STEPS="6"))
    result = op.execute(ctx)
    assert result["outcome"] == "succeeded" and result["name"] == cluster_of(ctx).name
    status = LocalBackend(str(local_root)).status(cluster_of(ctx))
    phases = {t.name: (t.phase, t.reason) for t in status.tasks}
    assert phases["worker-0"][0] is Phase.SUCCEEDED and phases["worker-1"][0] is Phase.SUCCEEDED
    assert phases["ps-0"] == (Phase.FAILED, "Deleted") or phases["ps-0"][1] == "Deleted"
    text = capfd.readouterr().out  # the task log (structlog writes to stdout)
    assert "step 6/6 (100.0%)" in text and "ETA" in text
    assert "----- log of ps-0" in text  # PS logs copied before the PS were deleted
    assert_no_processes(local_root)


def test_parameter_server_success_is_the_chief_and_deletes_workers(local_root, capfd) -> None:
    ctx = task_context()
    op = make_op(spec_dict("parameter_server", workers=2, STEPS="3"), cleanup="all")
    assert op.execute(ctx)["outcome"] == "succeeded"
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)
    # cleanup="all" keeps nothing: every task's log is in the task log before its delete,
    # the chief's (which finished by itself) first.
    out = capfd.readouterr().out
    copied = [
        line.split("----- log of ")[1].split(" ")[0] for line in out.splitlines() if "----- log of " in line
    ]
    assert sorted(copied) == ["chief-0", "ps-0", "worker-0", "worker-1"], copied
    chief = out.index("----- log of chief-0")
    assert "chief-0 exiting with 0" in out[chief : out.index("----- end of chief-0")]
    assert chief < out.index("deleted cluster")


def test_deferred_cleanup_all_copies_the_finished_tasks_and_not_the_released_ps(local_root, capfd) -> None:
    ctx = task_context()
    op = make_op(spec_dict("between_graph", workers=2, STEPS="3"), deferrable=True, cleanup="all")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    event = run_trigger(type(deferred.value.trigger)(**deferred.value.trigger.serialize()[1]))
    assert event["released"] == ["ps"]
    capfd.readouterr()
    result = getattr(op, deferred.value.method_name)(ctx, event, **deferred.value.kwargs)
    assert result["outcome"] == "succeeded"
    out = capfd.readouterr().out
    copied = [
        line.split("----- log of ")[1].split(" ")[0] for line in out.splitlines() if "----- log of " in line
    ]
    assert sorted(copied) == ["worker-0", "worker-1"], copied  # the PS's went with the triggerer
    assert "could not read the log" not in out and "deleting ps in" not in out
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_worker_failure_fails_fast_naming_task_and_code(local_root) -> None:
    ctx = task_context()
    op = make_op(spec_dict("between_graph", workers=2, STEPS="2", EXIT_CODE_1="3", STEP_SECONDS="0.05"))
    op_spec = op.cluster_spec
    op_spec["permanent_exit_codes"] = [3]
    with pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    assert err.value.task == "worker-1" and "exit code 3" in str(err.value)
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_bad_spec_fails_before_anything_is_created(local_root) -> None:
    spec = spec_dict()
    spec["worker"] = {"replicas": -2}
    with pytest.raises(SpecError, match=r"worker\.replicas"):
        make_op(spec).execute(task_context())
    assert not local_root.exists() or not list(local_root.glob("*/*/state.json"))


@pytest.mark.parametrize(
    "command", [["no-such-exe-tfk"], ["python", "no_such_script.py"]], ids=["executable", "script"]
)
def test_a_failed_pre_flight_check_logs_no_create_or_delete(local_root, capfd, command) -> None:
    """Nothing was created, so the task log tells no create/delete story (issue 10, 11)."""
    spec = spec_dict("all_reduce", workers=1)
    spec["command"] = command
    with pytest.raises(LocalMachineError, match=command[-1]):
        make_op(spec).execute(task_context())
    out = capfd.readouterr().out
    for told in ("creating cluster", "deleting cluster", "----- log of", "deleted cluster"):
        assert told not in out, out[-2000:]
    assert "was not created; nothing to delete" in out
    assert not list(local_root.glob("*/*/state.json"))


def test_on_kill_while_waiting_deletes_everything(local_root) -> None:
    ctx = task_context()
    op = make_op(spec_dict("between_graph", workers=2, STEPS="1000", STEP_SECONDS="0.1"))
    thread, errors = execute_in_thread(op, ctx)
    backend = LocalBackend(str(local_root))
    wait_for(
        lambda: backend.exists(cluster_of(ctx)) and cluster_processes(local_root), 30, "the cluster running"
    )
    op.on_kill()  # what Airflow calls on mark-failed / SIGTERM
    thread.join(30)
    assert not thread.is_alive()
    assert errors and isinstance(errors[0], TrainingFailed)
    assert not backend.exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_execution_timeout_in_blocking_mode_deletes_everything(local_root) -> None:
    from airflow.sdk.execution_time.timeout import timeout

    ctx = task_context()
    op = make_op(spec_dict("between_graph", workers=1, STEPS="1000", STEP_SECONDS="0.1"))
    with pytest.raises(AirflowTaskTimeout) as info, timeout(4):  # Airflow's own timeout mechanism
        op.execute(ctx)
    # the words of the deferrable wait's timeout, not Airflow's "Timeout, PID: N"
    assert (
        str(info.value)
        == f"cluster {cluster_of(ctx).name}: the training exceeded the task's execution_timeout"
    )
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_a_cluster_deleted_from_outside_is_already_gone_not_never_created(local_root, capfd) -> None:
    """kill_previous of a newer run deletes this run's cluster: the task fails, and its
    clean-up says the cluster is gone, not that it was never created."""
    ctx = task_context()
    op = make_op(spec_dict("between_graph", workers=1, STEPS="1000", STEP_SECONDS="0.1"))
    thread, errors = execute_in_thread(op, ctx)
    backend = LocalBackend(str(local_root))
    wait_for(
        lambda: backend.exists(cluster_of(ctx)) and cluster_processes(local_root), 30, "the cluster running"
    )
    backend.delete(cluster_of(ctx), "killed by the newer run manual__2 (previous_run_policy=kill_previous)")
    thread.join(60)
    assert not thread.is_alive() and errors and isinstance(errors[0], TrainingFailed)
    out = capfd.readouterr().out
    assert "was not created" not in out
    assert f"cluster {cluster_of(ctx).name} is already gone (" in out and "killed by the newer run" in out
    assert_no_processes(local_root)


def run_trigger(trigger) -> dict:
    async def first_event():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first_event())


def test_deferrable_success_then_cleanup(local_root) -> None:
    ctx = task_context()
    op = make_op(spec_dict("between_graph", workers=2, STEPS="4"), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    # The trigger must survive serialisation to the triggerer.
    path, kwargs = trigger.serialize()
    assert path == "airflow_tfk.triggers.cluster.TFClusterDoneTrigger"
    event = run_trigger(type(trigger)(**kwargs))
    assert event["status"] == "success"
    # The triggerer ended the PS itself: a paused DAG, or no free worker slot, would not
    # resume the task, and nothing else would (the PS never exit by themselves).
    assert event["released"] == ["ps"]
    ps = LocalBackend(str(local_root)).status(cluster_of(ctx)).task("ps", 0)
    assert ps is not None and ps.reason == "Deleted"
    assert_no_processes(local_root)
    result = getattr(op, deferred.value.method_name)(ctx, event, **deferred.value.kwargs)
    assert result["outcome"] == "succeeded"


def test_deferrable_execution_timeout_deletes_everything(local_root) -> None:
    from datetime import timedelta

    ctx = task_context()
    op = make_op(
        spec_dict("between_graph", workers=1, STEPS="1000", STEP_SECONDS="0.1"),
        deferrable=True,
        execution_timeout=timedelta(seconds=3),
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    event = run_trigger(deferred.value.trigger)
    assert event["status"] == "timeout"
    with pytest.raises(AirflowTaskTimeout):
        op.execute_complete(ctx, event, **deferred.value.kwargs)
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_trigger_on_kill_deletes_the_cluster(local_root) -> None:
    ctx = task_context()
    op = make_op(spec_dict("between_graph", workers=1, STEPS="1000", STEP_SECONDS="0.1"), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger

    async def killed_while_waiting():
        task = asyncio.create_task(run_trigger_async(trigger))
        await asyncio.sleep(1.0)
        task.cancel()  # the triggerer cancels the trigger, then calls on_kill
        await trigger.on_kill()

    asyncio.run(killed_while_waiting())
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)


async def run_trigger_async(trigger):
    async for event in trigger.run():
        return event


def test_retry_reattaches_instead_of_creating_a_second_cluster(local_root, capfd) -> None:
    ctx = task_context()
    spec = spec_dict("between_graph", workers=1, STEPS="10", STEP_SECONDS="0.3")
    first = make_op(spec, deferrable=True)
    with pytest.raises(TaskDeferred):
        first.execute(ctx)  # the task's process then dies: the cluster lives on
    backend = LocalBackend(str(local_root))
    pids_before = set(cluster_processes(local_root))
    result = make_op(spec).execute(ctx)  # the retry, same task instance identity
    assert result["outcome"] == "succeeded"
    assert "reattaching to existing cluster" in capfd.readouterr().out
    assert len(list(local_root.glob("*/*/state.json"))) == 1
    assert pids_before  # the first try's processes were the ones that finished the work
    assert backend.exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_kill_previous_kills_the_earlier_run_which_fails_naming_the_newer(local_root) -> None:
    spec = spec_dict("between_graph", workers=1, STEPS="1000", STEP_SECONDS="0.1")
    first_ctx, second_ctx = task_context("scheduled__01"), task_context("scheduled__02")
    thread, errors = execute_in_thread(make_op(spec), first_ctx)
    backend = LocalBackend(str(local_root))
    deadline = time.monotonic() + 30
    while not backend.exists(cluster_of(first_ctx)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    quick = spec_dict("between_graph", workers=1, STEPS="2")
    result = make_op(quick, previous_run_policy="kill_previous").execute(second_ctx)
    assert result["outcome"] == "succeeded"
    thread.join(30)
    assert errors and isinstance(errors[0], TrainingFailed)
    assert "scheduled__02" in str(errors[0]) and "kill_previous" in str(errors[0])
    assert_no_processes(local_root)


def test_skip_policy_skips_while_an_earlier_run_is_alive(local_root) -> None:
    spec = spec_dict("between_graph", workers=1, STEPS="1000", STEP_SECONDS="0.1")
    first = make_op(spec, deferrable=True)
    with pytest.raises(TaskDeferred):
        first.execute(task_context("scheduled__01"))
    with pytest.raises(AirflowSkipException):
        make_op(spec, previous_run_policy="skip").execute(task_context("scheduled__02"))
    assert not LocalBackend(str(local_root)).exists(cluster_of(task_context("scheduled__02")))


def test_invalid_policy_is_rejected_at_parse_time() -> None:
    with pytest.raises(ValueError, match="previous_run_policy"):
        TFTrainingOperator(task_id="t", cluster_spec={}, previous_run_policy="murder")


def test_fixed_name_cannot_be_taken_over_by_another_run(local_root) -> None:
    """Issue 10 item 1: a second run of the same task with a fixed name neither reports the
    first run's cluster as its own nor deletes it (its on_kill included)."""
    from airflow_tfk.core.errors import ClusterOwnershipError

    spec = {**spec_dict("between_graph", workers=1, STEPS="1000", STEP_SECONDS="0.1"), "name": "fixed"}
    first = make_op(dict(spec))
    thread, errors = execute_in_thread(first, task_context("run-1"))
    backend = LocalBackend(str(local_root))
    ref = ClusterRef("fixed", "default")
    deadline = time.monotonic() + 30
    while not (backend.exists(ref) and cluster_processes(local_root)):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    uid = local_state(backend, ref)["uid"]

    second = make_op(dict(spec, env={**spec["env"], "OTHER": "params"}))
    with pytest.raises(ClusterOwnershipError, match="run 'run-1'"):
        second.execute(task_context("run-2"))
    second.on_kill()  # what Airflow does when the failed try is killed
    assert backend.exists(ref) and local_state(backend, ref)["uid"] == uid
    assert backend.status(ref).tasks and all(t.reason != "Deleted" for t in backend.status(ref).tasks)

    first.on_kill()
    thread.join(30)
    assert not thread.is_alive() and errors
    assert_no_processes(local_root)


def test_on_failure_keep_keeps_the_failed_tasks_and_stops_the_ps(local_root) -> None:
    ctx = task_context("keep-run")
    spec = spec_dict("between_graph", workers=1, STEPS="2", EXIT_CODE_0="3", STEP_SECONDS="0.05")
    spec["permanent_exit_codes"] = [3]
    op = make_op(spec, on_failure="keep")
    with pytest.raises(TrainingFailed):
        op.execute(ctx)
    backend = LocalBackend(str(local_root))
    ref = cluster_of(ctx)
    assert backend.exists(ref)  # kept for debugging
    status = backend.status(ref)
    assert status.task("worker", 0).phase is Phase.FAILED
    assert status.task("ps", 0).reason == "Deleted"  # what never exits is stopped
    assert_no_processes(local_root)
    with pytest.raises(ValueError, match="^on_failure"):
        make_op(spec, on_failure="sometimes")


def test_wait_for_the_previous_run_defers_instead_of_holding_a_worker_slot(local_root) -> None:
    """previous_run_policy='wait', deferrable: the task defers on the earlier run's cluster
    (never deleting it, even if killed), and when that one has finished it starts its own."""
    earlier_ctx, ctx = task_context("scheduled__1"), task_context("scheduled__2")
    spec = spec_dict("between_graph", workers=1, STEPS="1000", STEP_SECONDS="0.1")
    earlier = make_op(spec, deferrable=True)
    with pytest.raises(TaskDeferred):
        earlier.execute(earlier_ctx)  # the earlier run's cluster trains on
    op = make_op(spec, deferrable=True, previous_run_policy="wait")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = deferred.value.trigger
    assert deferred.value.method_name == "execute_after_previous_run"
    assert trigger.cluster["name"] == cluster_of(earlier_ctx).name and trigger.delete_on_kill is False
    backend = LocalBackend(str(local_root))
    assert not backend.exists(cluster_of(ctx))  # nothing of its own yet

    backend.delete(cluster_of(earlier_ctx), "the earlier run ended")
    event = run_trigger(type(trigger)(**trigger.serialize()[1]))
    assert event["status"] == "failed"  # the earlier run's outcome, not this run's
    with pytest.raises(TaskDeferred) as own:
        op.execute_after_previous_run(ctx, event)
    assert own.value.method_name == "execute_complete"
    assert own.value.trigger.cluster["name"] == cluster_of(ctx).name and backend.exists(cluster_of(ctx))
    backend.delete(cluster_of(ctx))
    assert_no_processes(local_root)


def test_wait_for_the_previous_run_starts_when_it_succeeds_holding_no_slot_meanwhile(local_root) -> None:
    """previous_run_policy='wait', deferrable: while the earlier run trains, the task is
    deferred (no worker slot); the earlier run's own success ends the wait, and the
    resumed task then trains its own run to success."""
    earlier_ctx, ctx = task_context("scheduled__1"), task_context("scheduled__2")
    spec = spec_dict("all_reduce", workers=1, STEPS="15", STEP_SECONDS="0.1")
    earlier = make_op(spec, deferrable=True)
    with pytest.raises(TaskDeferred) as earlier_deferred:
        earlier.execute(earlier_ctx)
    op = make_op(spec, deferrable=True, previous_run_policy="wait")
    started = time.monotonic()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    assert time.monotonic() - started < 5  # deferred at once, not polled in this thread
    backend = LocalBackend(str(local_root))
    assert not backend.exists(cluster_of(ctx))
    event = run_trigger(type(deferred.value.trigger)(**deferred.value.trigger.serialize()[1]))
    assert event["status"] == "success" and event["cluster"]["name"] == cluster_of(earlier_ctx).name
    assert backend.exists(cluster_of(earlier_ctx))  # waited on, never touched
    with pytest.raises(TaskDeferred) as own:
        op.execute_after_previous_run(ctx, event)
    own_event = run_trigger(own.value.trigger)
    assert own_event["status"] == "success"
    assert getattr(op, own.value.method_name)(ctx, own_event, **own.value.kwargs)["outcome"] == "succeeded"
    earlier_event = run_trigger(earlier_deferred.value.trigger)
    assert earlier.execute_complete(earlier_ctx, earlier_event, **earlier_deferred.value.kwargs)
    assert_no_processes(local_root)


# -- predictive deadlines (run/forecast.py) -----------------------------------------------------
# The fake trainer's steps are STEP_SECONDS apart: 1000 steps of 0.1 s end 100 s after the
# start, far past an execution_timeout of 30 s; the forecast says so within seconds.
def _slow_spec() -> dict:
    return spec_dict("all_reduce", workers=1, STEPS="1000", STEP_SECONDS="0.1")


def test_a_forecast_miss_calls_back_in_the_task_and_the_run_goes_on_with_warn(local_root) -> None:
    from datetime import timedelta

    seen: list[tuple[dict, dict]] = []
    ctx = task_context()
    op = make_op(
        _slow_spec(),
        execution_timeout=timedelta(seconds=30),
        on_deadline_forecast=lambda context, info: seen.append((context, info)),
    )
    thread, errors = execute_in_thread(op, ctx)
    wait_for(lambda: seen, timeout=20)
    assert thread.is_alive()  # warn: the training goes on
    context, info = seen[0]
    assert (
        context is ctx and info["action"] == "warn" and info["deadline_of"] == "the task's execution_timeout"
    )
    assert info["late_seconds"] > 0 and 0 < info["step"] < 1000
    op.on_kill()
    thread.join(30)
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))


def test_a_deferred_forecast_resumes_the_task_for_its_callback_then_waits_again(local_root) -> None:
    from datetime import timedelta

    seen: list[dict] = []
    ctx = task_context()
    op = make_op(
        _slow_spec(),
        deferrable=True,
        execution_timeout=timedelta(seconds=30),
        on_deadline_forecast=lambda context, info: seen.append(info),
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    path, kwargs = deferred.value.trigger.serialize()
    assert kwargs["forecasts"][0]["alerted"] is False and kwargs["forecasts"][0]["hand_over"] is True
    event = run_trigger(type(deferred.value.trigger)(**kwargs))
    assert event["status"] == "forecast" and event["forecast"]["step"] > 0
    assert seen == []  # the triggerer never runs the DAG's code
    with pytest.raises(TaskDeferred) as again:
        op.execute_complete(ctx, event, **deferred.value.kwargs)
    assert len(seen) == 1 and seen[0]["step"] == event["forecast"]["step"]
    # the same deadline, the alert raised: the next trigger does not resume the task again
    assert again.value.kwargs["deadline"] == deferred.value.kwargs["deadline"]
    assert again.value.trigger.serialize()[1]["forecasts"][0]["alerted"] is True
    assert again.value.trigger.deadline == deferred.value.trigger.deadline
    assert LocalBackend(str(local_root)).exists(cluster_of(ctx))
    op.on_kill()
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))


def test_a_deferred_checkpoint_and_stop_ends_the_run_failed_naming_the_forecast(local_root) -> None:
    from datetime import timedelta

    ctx = task_context()
    op = make_op(
        _slow_spec(),
        deferrable=True,
        execution_timeout=timedelta(seconds=30),
        deadline_action="checkpoint_and_stop",
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    event = run_trigger(deferred.value.trigger)
    # no callback to run: the triggerer stops it itself, the task resumes only to end it
    assert event["status"] == "failed" and event["message"].startswith("stopped before its deadline")
    with pytest.raises(TrainingFailed, match="stopped before its deadline: deadline forecast: at step"):
        op.execute_complete(ctx, event, **deferred.value.kwargs)
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_deadline_action_is_checked_at_parse_time() -> None:
    with pytest.raises(SpecError, match="deadline_action"):
        make_op(_slow_spec(), deadline_action="kill")
    with pytest.raises(ValueError, match="on_deadline_forecast: must be callable"):
        make_op(_slow_spec(), on_deadline_forecast="page me")


def test_a_deferred_warn_without_a_callback_never_resumes_the_task(local_root) -> None:
    """Nothing for the task to do: the triggerer logs the alert and waits on."""
    from datetime import timedelta

    ctx = task_context()
    op = make_op(_slow_spec(), deferrable=True, execution_timeout=timedelta(seconds=12))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    assert deferred.value.trigger.serialize()[1]["forecasts"][0]["hand_over"] is False
    event = run_trigger(deferred.value.trigger)
    assert event["status"] == "timeout"  # no forecast event before the deadline
    with pytest.raises(AirflowTaskTimeout):
        op.execute_complete(ctx, event, **deferred.value.kwargs)
    assert_no_processes(local_root)


# -- usage and cost (run/usage.py) --------------------------------------------------------------
def _priced_spec(steps: str = "10", seconds: str = "0.3") -> dict:
    spec = spec_dict("between_graph", workers=2, STEPS=steps, STEP_SECONDS=seconds)
    spec["worker"]["resources"] = {"cpu": "500m", "memory": "1Gi"}
    spec["ps"]["resources"] = {"cpu": "250m", "memory": "512Mi"}
    return spec


def _training_span(backend: LocalBackend, ref: ClusterRef, role: str, index: int) -> float:
    """What the task itself says it trained: its first progress line's start to its last."""
    from airflow_tfk.protocol.progress import parse_line

    lines = [p for p in map(parse_line, backend.logs(ref, role, index).splitlines()) if p is not None]
    return lines[-1].time - lines[0].start_time


def test_the_usage_of_a_run_is_logged_priced_and_returned(local_root, capfd) -> None:
    ctx = task_context()
    op = make_op(_priced_spec(), prices={"cpu_core_hour": 3.6, "memory_gib_hour": 0.36, "currency": "USD"})
    t0 = time.time()
    result = op.execute(ctx)
    wall = time.time() - t0
    usage = result["usage"]
    roles = usage["per_role"]
    assert usage["tasks"] == 3 and set(roles) == {"ps", "worker"}
    backend = LocalBackend(str(local_root))
    trained = [_training_span(backend, cluster_of(ctx), "worker", i) for i in (0, 1)]
    # each worker counts from its start to its exit: its own training and the process's
    # start-up (an interpreter and an import), never more than the whole run
    assert sum(trained) <= roles["worker"]["seconds"] <= sum(trained) + 2 * 3.0, (trained, roles)
    # the PS runs from before the workers' first step until the clean-up deletes it
    assert max(trained) <= roles["ps"]["seconds"] <= wall
    for role, cpu, gib in (("worker", 0.5, 1.0), ("ps", 0.25, 0.5)):
        f = roles[role]
        assert f["core_seconds"] == pytest.approx(f["seconds"] * cpu, abs=0.01)
        assert f["memory_gib_seconds"] == pytest.approx(f["seconds"] * gib, abs=0.01)
    total = usage["total"]
    assert usage["cost"] == pytest.approx(
        (total["core_seconds"] * 3.6 + total["memory_gib_seconds"] * 0.36) / 3600, abs=1e-5
    )
    assert usage["currency"] == "USD"
    text = capfd.readouterr().out
    assert "usage: " in text and "core-hours" in text and " USD" in text


def test_a_deferred_run_counts_the_ps_the_triggerer_deleted(local_root) -> None:
    ctx = task_context()
    op = make_op(_priced_spec(steps="4"), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    event = run_trigger(deferred.value.trigger)
    assert event["released"] == ["ps"] and {t["role"] for t in event["usage"]} == {"ps", "worker"}
    result = op.execute_complete(ctx, event, **deferred.value.kwargs)
    ps = result["usage"]["per_role"]["ps"]
    assert ps["seconds"] > 0 and ps["core_seconds"] == pytest.approx(ps["seconds"] * 0.25, abs=0.01)
    assert "cost" not in result["usage"]  # no price table configured


def test_a_bad_price_table_fails_the_parse_naming_the_key() -> None:
    with pytest.raises(SpecError, match=r"prices\.cpu_core_hour"):
        make_op(_priced_spec(), prices={"cpu_core_hour": -1})


# -- budgets (spec budget:, run/forecast.py) ----------------------------------------------------
def _budget_spec(cap: dict) -> dict:
    spec = _slow_spec()  # ~100 s of steps
    spec["worker"]["resources"] = {"cpu": "1", "memory": "1Gi"}
    spec["budget"] = cap
    return spec


@pytest.mark.parametrize("deferrable", [False, True], ids=["blocking", "deferred"])
def test_a_budget_below_the_projection_stops_the_run_at_the_crossing(local_root, deferrable) -> None:
    """1 core for ~100 s projects 0.028 core-hours; the cap is 0.01: the first progress
    line with a rate crosses it, and the run ends there, nothing left, naming the budget."""
    ctx = task_context()
    op = make_op(_budget_spec({"core_hours": 0.01, "action": "checkpoint_and_stop"}), deferrable=deferrable)
    t0 = time.monotonic()
    with pytest.raises(TrainingFailed) as failed:
        if deferrable:
            with pytest.raises(TaskDeferred) as deferred:
                op.execute(ctx)
            event = run_trigger(deferred.value.trigger)
            op.execute_complete(ctx, event, **deferred.value.kwargs)
        else:
            op.execute(ctx)
    took = time.monotonic() - t0
    text = str(failed.value)
    assert "stopped before crossing its budget: budget forecast: at step" in text
    assert "over its budget of 0.01 core-hours" in text
    assert took < 30, took  # at the projection's crossing, not at the cap's
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_a_cost_budget_without_a_price_table_fails_before_anything_is_created(local_root) -> None:
    ctx = task_context()
    op = make_op(_budget_spec({"cost": 5}))
    with pytest.raises(SpecError, match=r"budget\.cost: needs a price table"):
        op.execute(ctx)
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))


def test_a_cost_budget_is_priced_by_the_table(local_root, capfd) -> None:
    ctx = task_context()
    prices = {"cpu_core_hour": 36.0, "currency": "EUR"}  # 1 core for ~100 s: about 1 EUR
    op = make_op(_budget_spec({"cost": 0.2, "action": "checkpoint_and_stop"}), prices=prices)
    with pytest.raises(TrainingFailed, match=r"over its budget of 0\.2 EUR"):
        op.execute(ctx)
    assert_no_processes(local_root)
