"""The publish operator's ``approval`` option: checked at parse time, naming the field;
the HITL request it writes and how each answer (or none) decides."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators import _approval
from airflow_tfk.operators._approval import HumanApproval
from airflow_tfk.operators.serving import TFPublishModelOperator

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
        TFPublishModelOperator(task_id="p", model_name="digits", claim="m", backend="local", approval=value)
    assert info.value.field == field


def test_options() -> None:
    assert HumanApproval.from_option(None) is None and HumanApproval.from_option(False) is None
    assert HumanApproval.from_option(True) == HumanApproval()
    assert HumanApproval.from_option({"timeout_seconds": 60}).timeout_seconds == 60.0


def test_body_shows_candidate_against_serving() -> None:
    text = _approval.body(REQUEST)
    assert "| accuracy | 0.93 | 0.9 |" in text and "| loss | - | 0.3 |" in text
    assert "serving v1" in text and "digits-tfk-candidate" in text


@pytest.fixture
def served(monkeypatch):
    """Model ``digits`` on an in-memory server, version 1 serving; HITL requests recorded."""
    from airflow.sdk.execution_time import hitl

    from airflow_tfk.serving import targets
    from airflow_tfk.serving.publish import publish
    from airflow_tfk.serving.spec import ServingSpec
    from tests.serving.fakes import FakeServing

    target = FakeServing(ServingSpec(model_name="digits", claim="m"), {1: "ok", 2: "ok"})
    publish(target, 1, emit=lambda _: None, metrics={"accuracy": 0.9})
    requests: list[dict] = []
    monkeypatch.setattr(hitl, "upsert_hitl_detail", lambda **kw: requests.append(kw))
    monkeypatch.setattr(targets, "get_serving_target", lambda kind, spec, **config: target)
    return target, requests


def _context(*held: str) -> dict:
    """A task context whose ``ti.get_task_states`` answers, call by call, what Airflow's
    database holds for the publish (the last answer repeats; default ``running``)."""
    from tests.helpers import task_context

    ctx = task_context(task_id="publish")
    answers = list(held or ("running",))

    def get_task_states(dag_id, task_ids, run_ids, **_):
        state = answers.pop(0) if len(answers) > 1 else answers[0]
        return {run_ids[0]: {t: state for t in task_ids}}

    ctx["ti"].get_task_states = get_task_states
    return {**ctx, "task_instance": SimpleNamespace(id="ti-1")}


def _park(served):
    from airflow.sdk.exceptions import TaskAwaitingInput

    target, requests = served
    op = TFPublishModelOperator(
        task_id="publish",
        model_name="digits",
        claim="m",
        backend="local",
        version=2,
        metrics={"accuracy": 0.93},
        approval={"timeout_seconds": 600},
    )
    with pytest.raises(TaskAwaitingInput) as info:
        op.execute(_context())
    # parked with the candidate loaded under its own name only; version 1 still serves
    assert target.config.get("digits-tfk-candidate").versions == (2,)
    assert target.config.get("digits").versions == (1,) and target.label_version("stable") == 1
    (request,) = requests
    assert request["options"] == ["Approve", "Reject"] and request["defaults"] == ["Reject"]
    assert request["params"] == {} and request["ti_id"] == "ti-1"  # Airflow's API refuses None
    assert "| accuracy | 0.93 | 0.9 |" in request["body"]
    assert info.value.method_name == "execute_approved" and info.value.timeout.total_seconds() == 600
    return op, info.value.kwargs


def test_approved_candidate_is_promoted(served) -> None:
    target, _ = served
    op, kwargs = _park(served)
    event = {"chosen_options": ["Approve"], "params_input": {}, "responded_by_user": {"name": "ana"}}
    result = op.execute_approved(_context(), event, **kwargs)
    assert result["version"] == 2 and target.label_version("stable") == 2
    assert target.config.get("digits-tfk-candidate") is None


@pytest.mark.parametrize(
    ("event", "why"),
    [
        ({"chosen_options": ["Reject"], "params_input": {}, "responded_by_user": {"name": "bo"}}, "bo chose"),
        # Airflow 3.3's own timeout (the scheduler's sweep, models/hitl.py
        # as_resume_event_payload): the default option, no person, timedout
        (
            {
                "chosen_options": ["Reject"],
                "params_input": {},
                "responded_at": None,
                "responded_by_user": None,
                "timedout": True,
            },
            r"nobody answered in time \(Airflow applied the default \[Reject\]\)",
        ),
        # the HITL trigger's timeout without defaults (Airflow < 3.3)
        ({"error": "timed out", "error_type": "timeout"}, "nobody answered in time"),
    ],
)
def test_rejected_or_unanswered_candidate_is_withdrawn(served, event, why) -> None:
    from airflow_tfk.serving.publish import NotApproved

    target, _ = served
    op, kwargs = _park(served)
    with pytest.raises(NotApproved, match=why):
        op.execute_approved(_context(), event, **kwargs)
    assert target.config.get("digits-tfk-candidate") is None
    assert target.config.get("digits").versions == (1,) and target.label_version("stable") == 1
    assert not any(model == "digits" and version == 2 for model, version in target.predicted)


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


def test_body_cannot_be_forged_by_the_trainings_metrics() -> None:
    """The metrics are the training's own output: a name or value with '|', a newline or
    HTML stays inside its cell, so the approver reads one row per metric, as it was."""
    forged = {
        **REQUEST,
        "metrics": {"accuracy | 0.99 | 0.99 |\n| x": 0.1, "loss": "<img src=x onerror=alert(1)>"},
    }
    text = _approval.body(forged)
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 2 + 3  # head, rule, accuracy (serving), the forged name, loss
    assert all(line.count("|") - line.count("\\|") == 4 for line in rows), rows
    assert text.count("<img") == text.count("\\<img") == 1  # escaped: shown, not rendered


@pytest.mark.parametrize("subject", ["ok\n| forged |", "a\x1b[2J", "bidi \u202e", "nul \x00"])
def test_subject_is_one_printable_line(subject: str) -> None:
    with pytest.raises(SpecError) as info:
        HumanApproval.from_option({"subject": subject})
    assert info.value.field == "approval.subject"


def test_a_misspelt_option_names_the_one_meant() -> None:
    with pytest.raises(SpecError) as info:
        TFPublishModelOperator(
            task_id="p", model_name="digits", claim="m", backend="local", approval={"timeout": 5}
        )
    assert "unknown key (did you mean 'timeout_seconds'? allowed: " in str(info.value)


HOSTILE_TEXT = [
    "ana\nINFO - published version 9",
    "\x1b[2J\x1b]0;pwned\x07",
    "a\u202eb",
    "x" * 10_000,
    "\r\x00",
]


@pytest.mark.parametrize("text", HOSTILE_TEXT)
@pytest.mark.parametrize("where", ["name", "option", "error"])
def test_what_the_resume_event_says_reaches_the_log_escaped(text: str, where: str) -> None:
    """The approver's name, the options and the error are shown on one line, escaped and
    bounded: none can forge a log line or drive the terminal."""
    if where == "error":
        event = {"error": text, "error_type": "error"}
    else:
        event = {
            "chosen_options": [text if where == "option" else "Approve"],
            "responded_by_user": {"name": text if where == "name" else "ana"},
        }
    _, said = _approval.approved(event)
    assert said.isprintable() and len(said) < 400


def test_a_resumed_publish_that_airflow_failed_promotes_nothing(served) -> None:
    """Issue 35: the scheduler failed the resumed task (the parked execution's late exit);
    an approval in the event does not move the label, and the candidate is withdrawn."""
    from airflow_tfk.serving.publish import NotApproved

    target, _ = served
    op, kwargs = _park(served)
    event = {"chosen_options": ["Approve"], "params_input": {}, "responded_by_user": {"name": "ana"}}
    with pytest.raises(NotApproved, match="Airflow holds publish as failed"):
        op.execute_approved(_context("failed"), event, **kwargs)
    assert target.config.get("digits-tfk-candidate") is None
    assert target.label_version("stable") == 1 and target.config.get("digits").versions == (1,)


@pytest.mark.parametrize("failed_at", [2, 3])
def test_a_publish_failed_while_promoting_serves_what_served_before(served, failed_at) -> None:
    """Failed before the label moves (the fence, 2nd look) or just after (3rd look): the
    label is on version 1 again and the task fails, as Airflow recorded."""
    from airflow_tfk.serving.publish import NotApproved

    target, _ = served
    op, kwargs = _park(served)
    event = {"chosen_options": ["Approve"], "params_input": {}, "responded_by_user": {"name": "ana"}}
    held = ["running"] * (failed_at - 1) + ["failed"]
    with pytest.raises(NotApproved, match="Airflow holds publish as failed"):
        op.execute_approved(_context(*held), event, **kwargs)
    assert target.label_version("stable") == 1 and 2 not in target.config.get("digits").versions
    assert target.config.get("digits-tfk-candidate") is None


def test_an_answer_that_names_no_person_does_not_approve() -> None:
    from airflow_tfk.operators._approval import approved

    yes, why = approved({"chosen_options": ["Approve"], "responded_by_user": None})
    assert not yes and "names nobody" in why
