"""One approval case on a real deployment, and the check that matters after it: what
Airflow recorded and what the ``stable`` label serves agree (issues 35 and 37)."""

from __future__ import annotations

import time
from typing import Any

from .real_airflow import RealAirflow, wait_for

GROUP = ["publish.stage", "publish.approve", "publish.promote", "publish.withdraw"]
DONE = ("success", "failed", "skipped", "upstream_failed")


def state(airflow: RealAirflow, dag: str, run: str, task: str) -> str | None:
    from .real_airflow import ApiError

    try:
        value = airflow.task(dag, run, task)["state"]
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return None if value is None else str(value)


def parked_exit_read(airflow: RealAirflow, run: str, task: str) -> bool:
    """Whether the scheduler has read the parked execution's exit (the LocalExecutor's
    "success" of the task instance key) while the task awaited input: the line that
    airflow/jobs/scheduler_job_runner.py's process_executor_events logs for it."""
    log = (airflow.home / "logs" / "scheduler.log").read_text(errors="replace")
    needle = f"task_id={task}, run_id={run},"
    return any(
        "TaskInstance Finished:" in line and needle in line and "state=awaiting_input" in line
        for line in log.splitlines()
    )


def answer(
    airflow: RealAirflow, dag: str, run: str, task: str, choice: str | None, race: bool = False
) -> dict[str, Any]:
    wait_for(
        f"{dag}.{task} to await input",
        lambda: state(airflow, dag, run, task) == "awaiting_input",
        300,
        airflow,
        every=0.5,
    )
    if choice is not None and not race:
        # A person answers after seconds. An answer before the scheduler has read the
        # parked execution's exit loses the approval to Airflow's race (issue 35: the
        # resumed task instance is failed); such a prompt answer is the race case.
        wait_for(
            "the parked exit to be read", lambda: parked_exit_read(airflow, run, task), 120, airflow, 0.5
        )
    path = f"/dags/{dag}/dagRuns/{run}/taskInstances/{task}/-1/hitlDetails"
    request = dict(airflow.api("GET", path))
    if choice is not None:
        airflow.api("PATCH", path, {"chosen_options": [choice]})
    return request


def run_case(
    airflow: RealAirflow,
    serving: Any,
    dag: str,
    version: int,
    choice: str | None,
    *,
    race: bool = False,
    tasks: list[str] = GROUP,
    parked: str = "publish.approve",
    publishes: str = "publish.promote",
) -> dict[str, Any]:
    """Trigger ``dag`` for ``version``, answer ``choice`` (None: no answer), wait for
    every task to end; then Airflow's record and the served version must agree."""
    t0 = time.monotonic()
    run = airflow.trigger(dag, {"version": version, "tfk_e2e_race": race})
    request = answer(airflow, dag, run, parked, choice, race)
    wait_for(
        f"{dag} {run} to end",
        lambda: (
            airflow.run_state(dag, run) in ("success", "failed")
            and all(state(airflow, dag, run, t) in DONE for t in tasks)
        ),
        300,
        airflow,
    )
    states = {t: state(airflow, dag, run, t) for t in tasks}
    stable = serving.label_version("stable")
    published = states[publishes] == "success"
    print(f"{dag} v{version} answer {choice} race {race}: Airflow {states}; stable -> v{stable}", flush=True)
    assert published == (stable == version), (states, stable, airflow.tail())
    assert (serving.read_config() or {}).get("digits-tfk-candidate") is None, "a candidate was left"
    return {"run": run, "states": states, "request": request, "seconds": time.monotonic() - t0}
