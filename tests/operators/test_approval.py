"""The publish operator's ``approval`` option: checked at parse time, naming the field;
the HITL request it writes and how each answer (or none) decides."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_tfk.errors import SpecError
from airflow_tfk.operators import _approval
from airflow_tfk.operators._approval import HumanApproval, hitl_approver
from airflow_tfk.operators.serving import PublishModelOperator

REQUEST = {
    "model_name": "digits",
    "version": 2,
    "candidate": "digits-tfk-candidate",
    "metrics": {"accuracy": 0.93},
    "serving_version": 1,
    "serving_metrics": {"accuracy": 0.9, "loss": 0.3},
}


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("yes", "approval"),
        ({"timeout": 5}, "approval.timeout"),
        ({"timeout_seconds": 0}, "approval.timeout_seconds"),
        ({"poll_seconds": True}, "approval.poll_seconds"),
        ({"subject": ""}, "approval.subject"),
    ],
)
def test_bad_options_name_their_field(value, field) -> None:
    with pytest.raises(SpecError) as info:
        PublishModelOperator(task_id="p", model_name="digits", claim="m", backend="local", approval=value)
    assert info.value.field == field


def test_options() -> None:
    assert HumanApproval.from_option(None) is None and HumanApproval.from_option(False) is None
    assert HumanApproval.from_option(True) == HumanApproval()
    assert HumanApproval.from_option({"timeout_seconds": 60}).timeout_seconds == 60.0


def test_body_shows_candidate_against_serving() -> None:
    text = _approval.body(REQUEST)
    assert "| accuracy | 0.93 | 0.9 |" in text and "| loss | - | 0.3 |" in text
    assert "serving v1" in text and "digits-tfk-candidate" in text


class FakeHITL:
    def __init__(self, answers) -> None:
        self.answers = list(answers)
        self.requests: list[dict] = []

    def upsert(self, **kw) -> None:
        self.requests.append(kw)

    def get(self, ti_id):
        answer = self.answers.pop(0) if self.answers else None
        if answer is None:
            return SimpleNamespace(response_received=False, chosen_options=None, responded_by_user=None)
        return SimpleNamespace(
            response_received=True, chosen_options=[answer], responded_by_user=SimpleNamespace(name="ana")
        )


@pytest.fixture
def hitl(monkeypatch):
    def install(answers):
        fake = FakeHITL(answers)
        import airflow.sdk.execution_time.hitl as module

        monkeypatch.setattr(module, "upsert_hitl_detail", fake.upsert)
        monkeypatch.setattr(module, "get_hitl_detail_content_detail", fake.get)
        return fake

    return install


def _approver(timeout: float = 30.0):
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    context = {"task_instance": SimpleNamespace(id="ti-1")}
    return hitl_approver(context, HumanApproval(timeout, 5.0), lambda _: None, lambda: now[0], sleep)


@pytest.mark.parametrize(
    ("answers", "approved"), [([None, "Approve"], True), ([None, None, "Reject"], False)]
)
def test_the_answer_decides(hitl, answers, approved) -> None:
    fake = hitl(answers)
    assert _approver()(dict(REQUEST)) is approved
    (request,) = fake.requests
    assert request["options"] == ["Approve", "Reject"] and request["defaults"] == ["Reject"]
    assert request["ti_id"] == "ti-1" and "Promote digits version 2?" == request["subject"]


def test_no_answer_in_time_rejects(hitl) -> None:
    fake = hitl([None] * 100)
    assert _approver(timeout=12)(dict(REQUEST)) is False
    assert len(fake.answers) < 100  # it stopped asking at the deadline


def test_a_training_files_publish_block_takes_approval() -> None:
    from airflow_tfk.dagfactory.builder import build_dag
    from airflow_tfk.dagfactory.training import parse_training

    cluster = {
        "image": "x:1",
        "mode": "all_reduce",
        "command": ["python", "t.py"],
        "worker": {"replicas": 1},
        "storage": {"models": {"claim": "tfk-models"}},
    }
    data = {"cluster": cluster, "publish": {"model_name": "digits", "approval": {"timeout_seconds": 600}}}
    dag = build_dag(parse_training(data, default_dag_id="t", source="t.yaml"))
    assert dag.get_task("publish").approval == HumanApproval(600.0)
    data["publish"]["approval"] = {"timeout_seconds": -1}
    with pytest.raises(SpecError) as info:
        build_dag(parse_training(data, default_dag_id="t", source="t.yaml"))
    assert info.value.field == "publish.approval.timeout_seconds"
