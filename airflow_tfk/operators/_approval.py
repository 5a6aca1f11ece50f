"""A person's approval of a publish candidate, through Airflow's human-in-the-loop records.

The publish task writes a HITL request (options ``Approve``/``Reject``; the body shows the
candidate's metrics next to the serving version's) and parks, holding no worker slot,
while the candidate stays loaded as ``<model>-tfk-candidate``, where no client calls it.
The answer comes from Airflow's UI ("Required actions") or its REST API
(``PATCH /api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/{map_index}/hitlDetails``);
no answer within ``timeout_seconds`` is a rejection. On resume, an approval publishes the
same version again (the loaded candidate answers at once) and promotes it; anything else
withdraws the candidate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core.errors import SpecError, unknown_key
from airflow_tfk.core.printable import control_character, printable

APPROVE = "Approve"
REJECT = "Reject"


@dataclass(frozen=True)
class HumanApproval:
    """:param timeout_seconds: how long to wait for an answer; none by then rejects.
    :param poll_seconds: how often to look for the answer.
    :param subject: the request's headline (default: names the model and version)."""

    timeout_seconds: float = 3600.0
    poll_seconds: float = 5.0
    subject: str | None = None

    @classmethod
    def from_option(cls, value: object) -> HumanApproval | None:
        """``approval`` of the operator: None/False (none), True, or a mapping of fields."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if not isinstance(value, Mapping):
            raise SpecError(
                "approval",
                "must be true, false or a mapping of timeout_seconds, poll_seconds, subject",
                value,
            )
        unknown = sorted(str(k) for k in set(value) - {"timeout_seconds", "poll_seconds", "subject"})
        if unknown:
            allowed = ("poll_seconds", "subject", "timeout_seconds")
            raise SpecError(f"approval.{unknown[0]}", unknown_key(unknown[0], allowed))
        for key, lo, hi in (("timeout_seconds", 1, 7 * 24 * 3600), ("poll_seconds", 0.1, 600)):
            number = value.get(key, getattr(cls, key))
            if isinstance(number, bool) or not isinstance(number, (int, float)) or not lo <= number <= hi:
                raise SpecError(f"approval.{key}", f"must be a number of seconds from {lo} to {hi}", number)
        subject = value.get("subject")
        if subject is not None and (not isinstance(subject, str) or not 0 < len(subject) <= 200):
            raise SpecError("approval.subject", "must be text of 1 to 200 characters", subject)
        if subject is not None and control_character(subject) is not None:
            # The headline a person decides on: one line that shows what it holds.
            bad = control_character(subject)
            raise SpecError("approval.subject", f"must not contain the control character {bad!r}", subject)
        return cls(float(value.get("timeout_seconds", 3600)), float(value.get("poll_seconds", 5)), subject)


#: what changes meaning inside a Markdown table cell: '|' (a cell border), emphasis, code,
#: links, HTML, and the backslash itself
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~])")
MAX_CELL_CHARS = 80


def cell(value: object) -> str:
    """A value as one Markdown table cell that shows what it holds. The metrics are the
    training's own output: a name such as ``acc | 0.99 |`` or one with a newline must not
    add columns or rows (a forged score) to what the approver reads."""
    text = printable(str(value))
    if len(text) > MAX_CELL_CHARS:
        text = text[: MAX_CELL_CHARS - 3] + "..."
    return _MARKDOWN.sub(r"\\\1", text)


def body(request: Mapping[str, Any]) -> str:
    """The request's Markdown: candidate against serving version, metric by metric."""
    cand, serving = request.get("metrics") or {}, request.get("serving_metrics") or {}
    previous = request.get("serving_version")
    head = f"| metric | candidate v{request['version']} | serving " + (
        f"v{previous} |" if previous is not None else "(none) |"
    )
    rows = [head, "|---|---|---|"]
    for metric in sorted(set(cand) | set(serving), key=str):
        mine, theirs = (cell(m[metric]) if metric in m else "-" for m in (cand, serving))
        rows.append(f"| {cell(metric)} | {mine} | {theirs} |")
    return (
        f"`{request['candidate']}` (version {request['version']} of `{request['model_name']}`) answered its "
        "smoke test; no client can reach it yet.\n\n" + "\n".join(rows) + "\n\nApprove to promote it; reject "
        "(or no answer in time) rolls it back."
    )


def request_approval(
    context: Mapping[str, Any], config: HumanApproval, emit: Callable[[str], None]
) -> Callable[[dict[str, Any]], bool]:
    """The ``approve`` callback of :func:`~airflow_tfk.serving.publish.publish` for this
    task instance: writes the HITL request and stops the publish with the candidate loaded
    (:class:`~airflow_tfk.serving.publish.AwaitApproval`); the operator then parks."""

    def approve(request: dict[str, Any]) -> bool:
        from airflow.sdk.execution_time.hitl import upsert_hitl_detail

        from airflow_tfk.serving.publish import AwaitApproval

        subject = config.subject or f"Promote {request['model_name']} version {request['version']}?"
        upsert_hitl_detail(
            ti_id=context["task_instance"].id,
            options=[APPROVE, REJECT],
            subject=subject,
            body=body(request),
            defaults=[REJECT],
            params={},  # no form: the API refuses None
        )
        emit(f"waiting up to {config.timeout_seconds:.0f} s for a person to approve or reject: {subject}")
        raise AwaitApproval(request)

    return approve


def park(operator: Any, context: Mapping[str, Any], request: dict[str, Any], config: HumanApproval) -> None:
    """Wait for the answer without a worker slot: Airflow 3.3's awaiting-input state, or a
    deferral to the standard provider's HITL trigger before it. Resumes in
    ``execute_approved(context, event, request)``."""
    from datetime import timedelta

    timeout = timedelta(seconds=config.timeout_seconds)
    try:
        from airflow.sdk.exceptions import TaskAwaitingInput
    except ImportError:  # Airflow 3.1/3.2: the triggerer polls the answer
        from airflow.providers.standard.triggers.hitl import HITLTrigger
        from airflow.sdk.timezone import utcnow

        operator.defer(
            trigger=HITLTrigger(
                ti_id=context["task_instance"].id,
                options=[APPROVE, REJECT],
                defaults=[REJECT],
                params={},
                multiple=False,
                timeout_datetime=utcnow() + timeout,
            ),
            method_name="execute_approved",
            kwargs={"request": request},
        )
    raise TaskAwaitingInput(method_name="execute_approved", kwargs={"request": request}, timeout=timeout)


def _shown(value: object, limit: int = 200) -> str:
    """A value of the resume event as the log shows it: one line, escaped, bounded. The
    approver's name, the options and the error are typed by people or other systems, and
    a newline or an escape sequence in them must not forge lines of the task's log."""
    text = printable(str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def approved(event: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the resume event approves, and what it says (escaped: :func:`_shown`).
    Airflow's own timeout (the scheduler's sweep, or the HITL trigger) resumes with the
    default option and ``timedout: True``, no person: that is "nobody answered", never
    "someone chose"."""
    if "error" in event:
        kind = event.get("error_type", "error")
        return False, (
            "nobody answered in time"
            if kind == "timeout"
            else f"the approval failed: {_shown(event['error'])}"
        )
    chosen = list(event.get("chosen_options") or [])
    shown = "[" + ", ".join(_shown(c, 50) for c in chosen[:10]) + (", ..." if len(chosen) > 10 else "") + "]"
    if event.get("timedout"):
        return False, f"nobody answered in time (Airflow applied the default {shown})"
    who = event.get("responded_by_user") or {}
    name = who.get("name") if isinstance(who, Mapping) else getattr(who, "name", None)
    if not name:
        return False, f"no person answered (the recorded choice {shown} names nobody)"
    return chosen == [APPROVE], f"{_shown(name)} chose {shown}"


def airflow_states(context: Mapping[str, Any], task_ids: list[str]) -> dict[str, str | None]:
    """What Airflow's database holds now for ``task_ids`` of this run (through the task
    runner's supervisor and the execution API: not what this process believes)."""
    ti = context["ti"]
    states = ti.get_task_states(dag_id=ti.dag_id, task_ids=list(task_ids), run_ids=[ti.run_id])
    mine = states.get(ti.run_id) or {}
    out: dict[str, str | None] = {}
    for task_id in task_ids:
        state = mine.get(task_id)
        out[task_id] = None if state is None else str(getattr(state, "value", state))
    return out


def require_running(context: Mapping[str, Any], why: str) -> None:
    """The fence before anything a client can see: Airflow must hold this task instance
    as ``running``; otherwise (e.g. the scheduler failed it) :class:`NotApproved`."""
    from airflow_tfk.serving.publish import NotApproved

    ti = context["ti"]
    state = airflow_states(context, [ti.task_id])[ti.task_id]
    if state != "running":
        raise NotApproved(f"Airflow holds {ti.task_id} as {state}, not running: {why}")
