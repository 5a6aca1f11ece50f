"""stage >> approve >> promote, withdraw as teardown (operators/approval_flow.py): the
staged version serves exactly when Airflow records the promote as a success. The task
states and XComs are what Airflow's database would answer (``ti.get_task_states``,
``ti.xcom_pull``); the real deployment runs the same in tests/e2e/test_real_airflow.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_tfk.operators.approval_flow import (
    TFPromoteCandidateOperator,
    TFStageCandidateOperator,
    TFWithdrawCandidateOperator,
    publish_with_approval,
)
from airflow_tfk.serving.publish import NotApproved

IDS = {"stage_task_id": "p.stage", "approve_task_id": "p.approve"}
APPROVED = {
    "chosen_options": ["Approve"],
    "params_input": {},
    "responded_at": datetime(2026, 1, 1, tzinfo=UTC),
    "responded_by_user": {"id": "ana", "name": "ana"},
}


@pytest.fixture
def served(monkeypatch):
    from airflow_tfk.serving import targets
    from airflow_tfk.serving.publish import publish
    from airflow_tfk.serving.spec import ServingSpec
    from tests.serving.fakes import FakeServing

    target = FakeServing(ServingSpec(model_name="digits", claim="m"), {1: "ok", 2: "ok"})
    publish(target, 1, emit=lambda _: None, metrics={"accuracy": 0.9})
    monkeypatch.setattr(targets, "get_serving_target", lambda kind, spec, **config: target)
    return target


def _context(task_id: str, states: dict, xcoms: dict) -> dict:
    from tests.helpers import task_context

    ctx = task_context(task_id=task_id)
    ctx["ti"].get_task_states = lambda dag_id, task_ids, run_ids, **_: {
        run_ids[0]: {t: states.get(t) for t in task_ids}
    }
    ctx["ti"].xcom_pull = lambda task_ids: xcoms.get(task_ids)
    return ctx


def _stage(target) -> dict:
    op = TFStageCandidateOperator(
        task_id="p.stage",
        model_name="digits",
        claim="m",
        backend="local",
        version=2,
        metrics={"accuracy": 0.93},
    )
    request = op.execute(_context("p.stage", {}, {}))
    assert target.config.get("digits-tfk-candidate").versions == (2,)
    assert target.label_version("stable") == 1 and "| accuracy | 0.93 | 0.9 |" in request["body"]
    assert request["subject"] == "Promote digits version 2?" and request["version"] == 2
    return request


def _promote(target, states: dict, answer) -> dict:
    request = _stage(target)
    op = TFPromoteCandidateOperator(
        task_id="p.promote", model_name="digits", claim="m", backend="local", **IDS
    )
    return op.execute(_context("p.promote", states, {"p.stage": request, "p.approve": answer}))


def test_an_approval_airflow_recorded_promotes(served) -> None:
    held = {"p.stage": "success", "p.approve": "success", "p.promote": "running"}
    out = _promote(served, held, APPROVED)
    assert out["version"] == 2 and served.label_version("stable") == 2
    assert served.config.get("digits-tfk-candidate") is None


@pytest.mark.parametrize(
    ("held", "answer", "why"),
    [
        ({"p.approve": "failed"}, APPROVED, "Airflow holds .*'p.approve': 'failed'"),  # the race
        ({"p.promote": "failed"}, APPROVED, "Airflow holds .*'p.promote': 'failed'"),
        ({}, {**APPROVED, "chosen_options": ["Reject"]}, "chose"),
        ({}, {**APPROVED, "responded_by_user": None, "timedout": True}, "nobody answered in time"),
        ({}, None, "gave no approval"),
    ],
)
def test_no_promotion_without_airflows_record_of_an_approval(served, held, answer, why) -> None:
    states = {"p.stage": "success", "p.approve": "success", "p.promote": "running", **held}
    with pytest.raises(NotApproved, match=why):
        _promote(served, states, answer)
    assert served.label_version("stable") == 1 and served.config.get("digits").versions == (1,)


def test_withdraw_undoes_what_airflow_did_not_record(served) -> None:
    """The promote moved the label, then Airflow failed it: the teardown puts version 1
    back on the label and removes the candidate."""
    request = _stage(served)
    from airflow_tfk.serving.publish import publish, same_files

    publish(served, 2, emit=lambda _: None, approve=same_files(request))  # a promote Airflow then failed
    assert served.label_version("stable") == 2
    op = TFWithdrawCandidateOperator(
        task_id="p.withdraw",
        model_name="digits",
        claim="m",
        backend="local",
        promote_task_id="p.promote",
        **IDS,
    )
    states = {"p.stage": "success", "p.approve": "success", "p.promote": "failed"}
    out = op.execute(_context("p.withdraw", states, {"p.stage": request, "p.approve": APPROVED}))
    assert out["withdrawn"] and out["undid_promotion"]
    assert served.label_version("stable") == 1 and 2 not in served.config.get("digits").versions
    assert served.config.get("digits-tfk-candidate") is None


def test_withdraw_leaves_a_recorded_promotion(served) -> None:
    held = {"p.stage": "success", "p.approve": "success", "p.promote": "running"}
    _promote(served, held, APPROVED)
    op = TFWithdrawCandidateOperator(
        task_id="p.withdraw",
        model_name="digits",
        claim="m",
        backend="local",
        promote_task_id="p.promote",
        **IDS,
    )
    states = {**held, "p.promote": "success"}
    out = op.execute(_context("p.withdraw", states, {"p.stage": {"model_name": "digits", "version": 2}}))
    assert not out["withdrawn"] and served.label_version("stable") == 2


def test_the_group_uses_airflows_approval_operator() -> None:
    from airflow.providers.standard.operators.hitl import ApprovalOperator
    from airflow.sdk import DAG

    with DAG("d", schedule=None):
        group = publish_with_approval(
            "p", model_name="digits", claim="m", backend="local", timeout_seconds=60
        )
    tasks = {t.task_id: t for t in group.children.values()}
    approve = tasks["p.approve"]
    assert isinstance(approve, ApprovalOperator) and approve.defaults == ["Reject"]
    assert approve.response_timeout.total_seconds() == 60
    assert tasks["p.withdraw"].is_teardown and tasks["p.stage"].is_setup
    assert tasks["p.promote"].upstream_task_ids == {"p.approve"}
