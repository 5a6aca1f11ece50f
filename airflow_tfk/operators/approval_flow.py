"""Publish after a person's approval, as tasks Airflow records one by one (issues 35, 37).

``publish_with_approval(...)`` adds a task group to the DAG::

    stage  >>  approve  >>  promote
      \\_______ withdraw (teardown of stage) _____/

- ``stage`` (:class:`TFStageCandidateOperator`): the quality gate, the candidate loaded as
  ``<model>-tfk-candidate`` where no client calls it, its smoke test. Its XCom is the
  approval request (version, files digest, metrics against the serving version's,
  subject, Markdown body). Nothing a client calls changes.
- ``approve``: Airflow's own :class:`~airflow.providers.standard.operators.hitl.ApprovalOperator`
  (options Approve/Reject, default Reject, ``response_timeout``). Reject, or no answer in
  time (Airflow applies the default with ``timedout=True``), skips ``promote``.
- ``promote`` (:class:`TFPromoteCandidateOperator`), a task that never parks and so is
  never resumed: it promotes only while Airflow's database holds ``approve`` as
  ``success`` with an answer a person gave (``Approve``), ``stage`` as ``success`` and
  ``promote`` itself as ``running`` - checked before the version loads under the
  model's name and again last before the ``stable`` label moves. If Airflow no longer
  holds it running once the label moved, the label goes back and the task fails.
- ``withdraw`` (:class:`TFWithdrawCandidateOperator`, a teardown: it runs whatever
  happened upstream): unless Airflow records ``promote`` as ``success``, it removes the
  candidate and, if the label was moved to the staged version, puts it back.

So what serves follows what Airflow recorded: ``promote`` success <=> the staged version
is on ``stable``. The race of the in-task approval (a parked execution's late exit makes
the scheduler fail the resumed task while it promotes) can still fail ``approve`` (an
Airflow scheduler issue), but then ``promote`` never runs and ``withdraw`` cleans up.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.constants import BackendKind
from airflow_tfk.operators.serving import TFPublishModelOperator

if TYPE_CHECKING:
    from airflow.sdk import Context


class TFStageCandidateOperator(TFPublishModelOperator):
    """The first half of a publish: gate, candidate loaded under its own name, smoke
    test; no client-visible change. Takes :class:`TFPublishModelOperator`'s parameters
    (except ``approval``) and ``subject`` (the approval's headline).

    :return: (XCom) the approval request: ``model_name``, ``version``, ``files``,
        ``metrics``, ``serving_version``, ``serving_metrics``, ``subject``, ``body``.
    """

    def __init__(self, *, subject: str | None = None, **kwargs: Any) -> None:
        if kwargs.get("approval"):
            from airflow_tfk.core.errors import SpecError

            raise SpecError("approval", "the approval is its own task here (publish_with_approval)")
        super().__init__(**kwargs)
        self.subject = subject
        self.outlets = []  # the serving event is promote's

    def _publish(
        self,
        context: Context,
        target: Any,
        version: int | None,
        gate: Any,
        metrics: Any,
        approve: Any,
        fence: Any = None,
    ) -> dict[str, Any]:
        from airflow_tfk._airflow.compat import AirflowSkipException
        from airflow_tfk.operators._approval import body
        from airflow_tfk.serving.base import NotBlessed
        from airflow_tfk.serving.publish import AwaitApproval, publish

        def stage(request: dict[str, Any]) -> bool:
            raise AwaitApproval(request)

        try:
            result = publish(
                target,
                version,
                self.sample_request,
                emit=self.log.info,
                gate=gate,
                metrics=metrics,
                approve=stage,
            )
        except AwaitApproval as staged:
            request = dict(staged.request)
            request["subject"] = self.subject or (
                f"Promote {request['model_name']} version {request['version']}?"
            )
            request["body"] = body(request)
            self.log.info("staged %s version %s for approval", request["model_name"], request["version"])
            return request
        except NotBlessed as exc:
            if exc.on_failure == "skip":
                raise AirflowSkipException(str(exc)) from exc
            raise
        raise AirflowSkipException(f"{result.model_name} version {result.version} already serves")


def _approval_answer(context: Context, approve_task_id: str) -> tuple[bool, str]:
    """What Airflow recorded for the approval task: its XCom (the ApprovalOperator's
    return value: ``chosen_options``, ``responded_by_user``)."""
    from airflow_tfk.operators._approval import approved

    answer = context["ti"].xcom_pull(task_ids=approve_task_id)
    if not isinstance(answer, Mapping):
        # ApprovalOperator pushes no XCom when it skips the promotion: Reject, or the
        # default (Reject) Airflow applied when nobody answered in time
        return False, f"{approve_task_id} gave no approval (Reject, or nobody answered in time)"
    return approved(answer)


class TFPromoteCandidateOperator(TFPublishModelOperator):
    """The second half: promote the staged version, only while Airflow holds the
    approval as given and this task as running.

    :param stage_task_id: the :class:`TFStageCandidateOperator` (its XCom: the request).
    :param approve_task_id: the ApprovalOperator.
    """

    def __init__(self, *, stage_task_id: str, approve_task_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stage_task_id = stage_task_id
        self.approve_task_id = approve_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_tfk.operators._approval import airflow_states, require_running
        from airflow_tfk.operators.serving import _undo_unless_running
        from airflow_tfk.serving.publish import NotApproved, same_files
        from airflow_tfk.serving.targets import get_serving_target

        request = context["ti"].xcom_pull(task_ids=self.stage_task_id)
        if not isinstance(request, Mapping) or "version" not in request:
            raise NotApproved(f"{self.stage_task_id} staged no candidate")
        name, version = request["model_name"], int(request["version"])

        def fence() -> None:
            states = airflow_states(context, [self.stage_task_id, self.approve_task_id, self.task_id])
            want = {self.stage_task_id: "success", self.approve_task_id: "success", self.task_id: "running"}
            wrong = {t: s for t, s in states.items() if s != want[t]}
            if wrong:
                raise NotApproved(f"{name} version {version} is not promoted: Airflow holds {wrong}")
            yes, why = _approval_answer(context, self.approve_task_id)
            if not yes:
                raise NotApproved(f"{name} version {version} is not promoted: {why}")

        fence()
        yes, why = _approval_answer(context, self.approve_task_id)
        self.log.info("approval of %s version %s: %s", name, version, why)
        config = self.backend_options()
        if self.backend == BackendKind.KUBERNETES:
            from airflow_tfk.operators._context import identity_from_context

            config["identity"] = identity_from_context(context)
        target = self.bound(get_serving_target(self.backend, self.spec(), **config))
        approve = same_files(dict(request))

        def approve_now(req: dict[str, Any]) -> bool:  # before the version loads under the model
            fence()
            return approve(req)

        out = self._publish(
            context,
            target,
            version,
            self.gate(),
            dict(request.get("metrics") or {}) or None,
            approve_now,
            fence,
        )
        _undo_unless_running(context, target, out, self.log.info)
        require_running(context, "checked once more after the undo window")
        return out


class TFWithdrawCandidateOperator(TFPublishModelOperator):
    """Teardown of the stage: unless Airflow records the promote as ``success``, the
    staged version serves nowhere (candidate entry removed; the ``stable`` label back on
    the version that served before, if it had moved). Takes the publish's parameters."""

    def __init__(
        self, *, stage_task_id: str, approve_task_id: str, promote_task_id: str, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.inlets, self.outlets = [], []
        self.stage_task_id = stage_task_id
        self.approve_task_id = approve_task_id
        self.promote_task_id = promote_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_tfk.operators._approval import airflow_states
        from airflow_tfk.serving.publish import withdraw_candidate, withdraw_version
        from airflow_tfk.serving.targets import get_serving_target

        ti = context["ti"]
        request = ti.xcom_pull(task_ids=self.stage_task_id)
        states = airflow_states(context, [self.stage_task_id, self.approve_task_id, self.promote_task_id])
        if not isinstance(request, Mapping) or "version" not in request:
            self.log.info("nothing was staged (%s); nothing to withdraw", states)
            return {"withdrawn": False, "states": states}
        name, version = request["model_name"], int(request["version"])
        yes, why = _approval_answer(context, self.approve_task_id)
        self.log.info("%s version %s: Airflow records %s; approval: %s", name, version, states, why)
        config = self.backend_options()
        if self.backend == BackendKind.KUBERNETES:
            from airflow_tfk.operators._context import identity_from_context

            config["identity"] = identity_from_context(context)
        target = self.bound(get_serving_target(self.backend, self.spec(), **config))
        if states[self.promote_task_id] == "success":
            withdraw_candidate(target, self.log.info)  # a no-op after a promotion
            return {"withdrawn": False, "states": states}
        previous = request.get("serving_version")
        if previous == version:
            withdraw_candidate(target, self.log.info)
            return {"withdrawn": False, "states": states}
        withdraw_candidate(target, self.log.info)
        undone = withdraw_version(target, version, previous, self.log.info)
        return {"withdrawn": True, "undid_promotion": undone, "states": states}


def publish_with_approval(
    group_id: str = "publish",
    *,
    model_name: str,
    timeout_seconds: float = 3600.0,
    subject: str | None = None,
    backend: str | None = None,
    backend_config: dict[str, Any] | None = None,
    **publish_kwargs: Any,
) -> Any:
    """The stage >> approve >> promote task group, with withdraw as the stage's teardown.
    ``publish_kwargs``: :class:`TFPublishModelOperator`'s parameters (``version``,
    ``claim``, ``serving``, ``quality_gate``...). Returns the TaskGroup."""
    from airflow.providers.standard.operators.hitl import ApprovalOperator
    from airflow.sdk import TaskGroup

    on_backend = {
        k: v for k, v in (("backend", backend), ("backend_config", backend_config)) if v is not None
    }
    with TaskGroup(group_id) as group:
        stage = TFStageCandidateOperator(
            task_id="stage", model_name=model_name, subject=subject, **on_backend, **publish_kwargs
        )
        ref = f"ti.xcom_pull(task_ids='{stage.task_id}')"
        approve = ApprovalOperator(
            task_id="approve",
            subject="{{ " + ref + "['subject'] }}",
            body="{{ " + ref + "['body'] }}",
            defaults="Reject",
            response_timeout=timedelta(seconds=timeout_seconds),
        )
        promote = TFPromoteCandidateOperator(
            task_id="promote",
            model_name=model_name,
            stage_task_id=stage.task_id,
            approve_task_id=approve.task_id,
            **on_backend,
            **{k: v for k, v in publish_kwargs.items() if k != "version"},
        )
        withdraw = TFWithdrawCandidateOperator(
            task_id="withdraw",
            stage_task_id=stage.task_id,
            approve_task_id=approve.task_id,
            promote_task_id=promote.task_id,
            model_name=model_name,
            **on_backend,
            **{k: v for k, v in publish_kwargs.items() if k != "version"},
        )
        stage >> approve >> promote >> withdraw.as_teardown(setups=stage)
    return group
