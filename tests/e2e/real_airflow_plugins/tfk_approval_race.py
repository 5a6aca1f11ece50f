"""Test only (the real-Airflow lane): the approval race of issues 35 and 37, made
deterministic for a DAG run whose conf has ``tfk_e2e_race: true``.

On a loaded worker the process of a task that parked for a person's input can exit late
(log flushing, listeners), and the scheduler reads its exit, the LocalExecutor's "success"
for that task instance key, only after a prompt answer has resumed the task: the scheduler
then fails the running task instance (airflow/jobs/scheduler_job_runner.py, "finished with
state success, but the task instance's state attribute is running").

Here, for such a run, the parked process exits only once Airflow runs the task instance
again, and the resumed execution starts its operator only after the scheduler has ruled on
that exit (the task instance no longer ``running``), both bounded by 60 s."""

from __future__ import annotations

import time
from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

BOUND = 60.0


def _raced(ti: Any) -> bool:
    ctx = getattr(ti, "_ti_context_from_server", None)
    conf = getattr(getattr(ctx, "dag_run", None), "conf", None) or {}
    return bool(conf.get("tfk_e2e_race"))


def _state(ti: Any) -> str | None:
    states = ti.get_task_states(dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id])
    return (states.get(ti.run_id) or {}).get(ti.task_id)


def _wait(ti: Any, until: Any) -> str | None:
    deadline, now = time.monotonic() + BOUND, None
    while time.monotonic() < deadline:
        now = _state(ti)
        if until(now):
            break
        time.sleep(0.2)
    return now


class _ApprovalRace:
    ti: Any = None

    @hookimpl
    def on_task_instance_running(self, previous_state: Any, task_instance: Any) -> None:
        self.ti = task_instance
        ctx = getattr(task_instance, "_ti_context_from_server", None)
        if _raced(task_instance) and getattr(ctx, "next_method", None):
            now = _wait(task_instance, lambda s: s != "running")
            print(f"tfk test plugin: the resumed execution goes on; Airflow holds it as {now}", flush=True)

    @hookimpl
    def before_stopping(self, component: Any) -> None:
        ti = self.ti
        state = getattr(ti, "state", None)
        if ti is None or getattr(state, "value", state) != "awaiting_input" or not _raced(ti):
            return
        now = _wait(ti, lambda s: s == "running")
        print(f"tfk test plugin: the parked process exits now (the task instance is {now})", flush=True)


class TfkApprovalRace(AirflowPlugin):
    name = "tfk_approval_race"
    listeners = [_ApprovalRace()]
