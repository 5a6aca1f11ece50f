"""A person's approval of a publish candidate, through Airflow's human-in-the-loop records.

The publish task writes a HITL request (options ``Approve``/``Reject``; the body shows the
candidate's metrics next to the serving version's) and waits for the answer while the
candidate stays loaded as ``<model>-tfk-candidate``, where no client calls it. The answer
comes from Airflow's UI ("Required actions") or its REST API
(``PATCH /api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/{map_index}/hitlDetails``).
The task keeps running while it waits (the candidate is state of this very task), so
the wait is bounded by ``timeout_seconds``; no answer by then is a rejection.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.errors import SpecError

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
            raise SpecError(
                f"approval.{unknown[0]}", "unknown key (allowed: poll_seconds, subject, timeout_seconds)"
            )
        for key, lo, hi in (("timeout_seconds", 1, 7 * 24 * 3600), ("poll_seconds", 0.1, 600)):
            number = value.get(key, getattr(cls, key))
            if isinstance(number, bool) or not isinstance(number, (int, float)) or not lo <= number <= hi:
                raise SpecError(f"approval.{key}", f"must be a number of seconds from {lo} to {hi}", number)
        subject = value.get("subject")
        if subject is not None and (not isinstance(subject, str) or not 0 < len(subject) <= 200):
            raise SpecError("approval.subject", "must be text of 1 to 200 characters", subject)
        return cls(float(value.get("timeout_seconds", 3600)), float(value.get("poll_seconds", 5)), subject)


def body(request: Mapping[str, Any]) -> str:
    """The request's Markdown: candidate against serving version, metric by metric."""
    cand, serving = request.get("metrics") or {}, request.get("serving_metrics") or {}
    previous = request.get("serving_version")
    head = f"| metric | candidate v{request['version']} | serving " + (
        f"v{previous} |" if previous is not None else "(none) |"
    )
    rows = [head, "|---|---|---|"]
    for metric in sorted(set(cand) | set(serving)):
        rows.append(f"| {metric} | {cand.get(metric, '-')} | {serving.get(metric, '-')} |")
    return (
        f"`{request['candidate']}` (version {request['version']} of `{request['model_name']}`) answered its "
        "smoke test; no client can reach it yet.\n\n" + "\n".join(rows) + "\n\nApprove to promote it; reject "
        "(or no answer in time) rolls it back."
    )


def hitl_approver(
    context: Mapping[str, Any],
    config: HumanApproval,
    emit: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Callable[[dict[str, Any]], bool]:
    """The ``approve`` callback of :func:`~airflow_tfk.serving.publish.publish` for this
    task instance."""

    def approve(request: dict[str, Any]) -> bool:
        from airflow.sdk.execution_time.hitl import get_hitl_detail_content_detail, upsert_hitl_detail

        ti_id = context["task_instance"].id
        subject = config.subject or f"Promote {request['model_name']} version {request['version']}?"
        upsert_hitl_detail(
            ti_id=ti_id, options=[APPROVE, REJECT], subject=subject, body=body(request), defaults=[REJECT]
        )
        emit(f"waiting up to {config.timeout_seconds:.0f} s for a person to approve or reject: {subject}")
        deadline = clock() + config.timeout_seconds
        while True:
            answer = get_hitl_detail_content_detail(ti_id)
            if answer.response_received:
                who = getattr(answer.responded_by_user, "name", None) or "someone"
                chosen = list(answer.chosen_options or [])
                emit(f"{who} answered {chosen}")
                return chosen == [APPROVE]
            if clock() >= deadline:
                emit(f"no answer within {config.timeout_seconds:.0f} s: rejected")
                return False
            sleep(config.poll_seconds)

    return approve
