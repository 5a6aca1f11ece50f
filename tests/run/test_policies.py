from __future__ import annotations

import pytest

from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus
from airflow_tfk.run.policies import Outcome, decisive_roles, evaluate, roles_after_success
from airflow_tfk.spec.cluster import Mode

S, R, F, P = Phase.SUCCEEDED, Phase.RUNNING, Phase.FAILED, Phase.PENDING


def status(**roles: list[Phase]) -> ClusterStatus:
    return ClusterStatus(
        tuple(TaskStatus(role, i, ph) for role, phases in roles.items() for i, ph in enumerate(phases))
    )


def test_between_graph_needs_every_worker() -> None:
    replicas = {"ps": 1, "worker": 3}
    assert evaluate(Mode.BETWEEN_GRAPH, replicas, status(ps=[R], worker=[S, S, R])).outcome is Outcome.RUNNING
    assert (
        evaluate(Mode.BETWEEN_GRAPH, replicas, status(ps=[R], worker=[S, S, S])).outcome is Outcome.SUCCEEDED
    )


def test_missing_task_is_not_success() -> None:
    # Only two of three workers reported: the third may not be created yet.
    assert evaluate(Mode.ALL_REDUCE, {"worker": 3}, status(worker=[S, S])).outcome is Outcome.RUNNING


def test_parameter_server_success_is_the_chief() -> None:
    replicas = {"chief": 1, "ps": 2, "worker": 2}
    assert (
        evaluate(Mode.PARAMETER_SERVER, replicas, status(chief=[S], ps=[R, R], worker=[R, R])).outcome
        is Outcome.SUCCEEDED
    )
    assert (
        evaluate(Mode.PARAMETER_SERVER, replicas, status(chief=[R], ps=[R, R], worker=[S, S])).outcome
        is Outcome.RUNNING
    )


def test_failure_names_the_task_and_reason() -> None:
    st = ClusterStatus(
        (TaskStatus("ps", 0, R), TaskStatus("worker", 0, S), TaskStatus("worker", 1, F, "OOMKilled", "", 137))
    )
    v = evaluate(Mode.BETWEEN_GRAPH, {"ps": 1, "worker": 2}, st)
    assert v.outcome is Outcome.FAILED
    assert v.failed_task is not None and v.failed_task.name == "worker-1"
    assert "worker-1" in v.message and "OOMKilled" in v.message and "137" in v.message


def test_vanished_cluster_fails() -> None:
    v = evaluate(Mode.BETWEEN_GRAPH, {"ps": 1, "worker": 1}, ClusterStatus((), exists=False))
    assert v.outcome is Outcome.FAILED and "no longer exists" in v.message


@pytest.mark.parametrize(
    "mode,expected",
    [
        (Mode.BETWEEN_GRAPH, ["ps", "evaluator"]),
        (Mode.PARAMETER_SERVER, ["ps", "worker", "evaluator"]),
        (Mode.ALL_REDUCE, ["evaluator"]),
    ],
)
def test_roles_after_success(mode: Mode, expected: list[str]) -> None:
    roles = ["chief", "ps", "worker", "evaluator"]
    if mode is Mode.ALL_REDUCE:
        roles.remove("ps")
    assert roles_after_success(mode, roles) == expected


def test_decisive_roles() -> None:
    assert decisive_roles(Mode.PARAMETER_SERVER, {"chief": 1, "ps": 1, "worker": 4}) == {"chief": 1}
    assert decisive_roles(Mode.BETWEEN_GRAPH, {"ps": 1, "worker": 4}) == {"worker": 4}


def test_status_roundtrip_and_summary() -> None:
    st = status(ps=[R], worker=[S, F])
    assert ClusterStatus.from_dict(st.to_dict()) == st
    assert st.summary() == "ps 1 running; worker 1 failed, 1 succeeded"


def test_a_failed_evaluator_does_not_fail_the_training() -> None:
    replicas = {"chief": 1, "ps": 1, "worker": 1, "evaluator": 1}
    running = status(chief=[R], ps=[R], worker=[R], evaluator=[F])
    assert evaluate(Mode.PARAMETER_SERVER, replicas, running).outcome is Outcome.RUNNING
    done = status(chief=[S], ps=[R], worker=[R], evaluator=[F])
    assert evaluate(Mode.PARAMETER_SERVER, replicas, done).outcome is Outcome.SUCCEEDED
    # any other role still fails it
    worker_failed = status(chief=[R], ps=[R], worker=[F], evaluator=[R])
    assert evaluate(Mode.PARAMETER_SERVER, replicas, worker_failed).outcome is Outcome.FAILED


def test_parameter_server_tolerates_lost_workers_up_to_the_bound() -> None:
    replicas = {"chief": 1, "ps": 1, "worker": 3}
    one_lost = status(chief=[R], ps=[R], worker=[R, F, R])
    # by default a lost worker fails the training, as before
    assert evaluate(Mode.PARAMETER_SERVER, replicas, one_lost).outcome is Outcome.FAILED
    assert evaluate(Mode.PARAMETER_SERVER, replicas, one_lost, max_lost_workers=1).outcome is Outcome.RUNNING
    done = status(chief=[S], ps=[R], worker=[R, F, R])
    assert evaluate(Mode.PARAMETER_SERVER, replicas, done, max_lost_workers=1).outcome is Outcome.SUCCEEDED
    two_lost = status(chief=[R], ps=[R], worker=[F, F, R])
    verdict = evaluate(Mode.PARAMETER_SERVER, replicas, two_lost, max_lost_workers=1)
    assert verdict.outcome is Outcome.FAILED
    assert "worker-0" in verdict.message and "worker-1" in verdict.message, verdict.message
    assert "max_lost_workers=1" in verdict.message


def test_lost_workers_never_excuse_a_lost_ps_or_chief() -> None:
    replicas = {"chief": 1, "ps": 1, "worker": 3}
    for st in (status(chief=[F], ps=[R], worker=[R, R, R]), status(chief=[R], ps=[F], worker=[R, F, R])):
        verdict = evaluate(Mode.PARAMETER_SERVER, replicas, st, max_lost_workers=2)
        assert verdict.outcome is Outcome.FAILED and verdict.failed_task.role in ("chief", "ps"), verdict
