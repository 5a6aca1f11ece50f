"""`TFTrainingOperator`: create the cluster, wait on it, clean up - in one task.

Kill-safe: an exception, ``execution_timeout`` (blocking or deferred), ``on_kill`` (mark
failed, ``dagrun_timeout``) and a failed training all delete the cluster after copying
the failed tasks' logs. A retry or a restarted task reattaches to its cluster (the name
is deterministic) or replaces it if it failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.constants import (
    CLEANUP,
    NAME_PREFIX,
    PROGRESS_INTERVAL_SECONDS,
    TENSORBOARD_TASK_ID,
    Cleanup,
    backend_kind,
    choice,
)
from airflow_tfk.operators._context import identity_from_context
from airflow_tfk.operators._on_backend import OnBackendOperator
from airflow_tfk.operators.tensorboard import TensorBoardLink
from airflow_tfk.spec import operator_options as args

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tfk.run.forecast import Forecast
    from airflow_tfk.run.handle import ClusterHandle
    from airflow_tfk.run.usage import Prices, Usage
    from airflow_tfk.spec.cluster import TFClusterSpec

# The trigger's own deadline fires first; Airflow's defer timeout is only a backstop.
_DEFER_TIMEOUT_MARGIN = timedelta(minutes=5)
# The evaluator evaluates the last checkpoint after the training's end: wait that long
# for its final metrics even when the ps grace period is shorter.
_EVALUATOR_MIN_WAIT = 20.0


class TFTrainingOperator(OnBackendOperator):
    """Run one distributed TensorFlow training from start to clean-up.

    :param cluster_spec: the cluster: a ``TFClusterSpec``, a mapping of its fields, or YAML
        text; without ``name`` it is derived from the task instance. (templated)
    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options. (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :param deferrable: wait in the triggerer, holding no worker slot. Default: Airflow's
        ``[operators] default_deferrable``.
    :param cleanup: after success, delete ``ps`` (the roles that never exit, after the
        grace period; deferred, the triggerer deletes them, without waiting for the task to
        resume) and keep the rest for the retention, or ``all`` (the whole cluster, by its
        label, namespace included; the logs of the chief and the first workers are copied
        into the task log first).
    :param on_failure: after a failed training, ``delete`` the cluster (the failed tasks'
        logs are copied first), or ``keep`` it for debugging for the retention (the roles
        that never exit, the PS, are deleted all the same). A killed task always deletes.
        The retention is the spec's ``ttl_seconds_after_finished``: Kubernetes deletes the
        kept Jobs then, and :class:`TFSweepOrphansOperator` the rest (Services,
        NetworkPolicy, the claims made from ``size:``, a per-training namespace).
    :param progress_interval: seconds between progress lines (step/total/%/ETA).
    :param stall_seconds: fail the training as stalled when its progress (the chief's, else
        worker 0's step) stands still this long while its tasks run, naming the task(s)
        that went silent; warn at half of it. 0 turns it off. Default: 10 progress intervals,
        at least 120 s (300 s at the default interval).
    :param tensorboard_task_id: the TensorBoard task whose URL the "TensorBoard" extra
        link of this task opens.
    :param previous_run_policy: what to do with a still-alive cluster of an earlier run of
        this task: ``allow`` (default), ``kill_previous``, ``skip`` or ``wait``.
    :param deadline_action: when the progress projects that the training ends after its
        deadline (the ``execution_timeout``, or the spec's ``max_duration_seconds``,
        whichever comes first) on two progress lines in a row: ``warn`` (default: a log
        line and the callback; the run goes on, and a run that speeds up clears the alert)
        or ``checkpoint_and_stop`` (also end the run at once, as failed: each training task
        takes its notice and saves a checkpoint, which a retry resumes from).
    :param prices: the price table of the run's usage (a mapping or JSON: ``cpu_core_hour``,
        ``memory_gib_hour``, ``accelerator_hour``, ``currency``); default: ``[tfk] prices``
        of Airflow's configuration. The usage (requested core-, memory-GiB- and
        accelerator-seconds per role, from each task's start and end) is logged at the end,
        with its cost when priced, and returned in the XCom as ``usage``.
    :param on_deadline_forecast: ``callback(context, forecast)`` for that alert, where
        ``forecast`` holds ``step``, ``total_steps``, ``eta_seconds``, ``projected_end``,
        ``deadline``, ``late_seconds``, ``deadline_of``, ``action`` and ``message``.
        Deferred, the task resumes to run it, then waits again (or stops).
    :return: (XCom) the cluster handle plus ``outcome``, and what the training produced:
        ``metrics`` (what the app's ``after_train`` returned), ``eval_metrics`` (the
        evaluator's last, with its ``step``), ``export`` (``model_name``, ``version``,
        ``path``; also as ``model_name``, ``model_version``, ``model_path``) and
        ``evaluator_error``. :class:`TFPublishModelOperator` downstream publishes
        ``model_version`` by default.

    Maximum duration: set ``execution_timeout`` (Airflow side; also enforced while
    deferred) and the spec's ``max_duration_seconds`` (cluster side, ``activeDeadlineSeconds``).
    """

    template_fields: Sequence[str] = ("cluster_spec", "backend_config", "previous_run_policy")
    ui_color = "#ff6f00"
    operator_extra_links = (TensorBoardLink(),)

    def __init__(
        self,
        *,
        cluster_spec: TFClusterSpec | Mapping[str, Any] | str,
        deferrable: bool | None = None,
        cleanup: Cleanup | str = CLEANUP,
        on_failure: str = "delete",
        progress_interval: float = PROGRESS_INTERVAL_SECONDS,
        stall_seconds: float | None = None,
        name_prefix: str = NAME_PREFIX,
        previous_run_policy: str = "allow",
        tensorboard_task_id: str = TENSORBOARD_TASK_ID,
        deadline_action: str = "warn",
        on_deadline_forecast: Callable[[Context, dict[str, Any]], Any] | None = None,
        prices: Mapping[str, Any] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        args.cluster_spec_arg(cluster_spec)
        args.deadline_action_arg(deadline_action)
        if on_deadline_forecast is not None and not callable(on_deadline_forecast):
            raise ValueError(f"on_deadline_forecast: must be callable (got {on_deadline_forecast!r})")
        self.deadline_action = deadline_action
        self.on_deadline_forecast = on_deadline_forecast
        if prices is not None:  # imported only then: the parse of a DAG without prices stays light
            from airflow_tfk.run.usage import Prices

            Prices.parse(prices)  # a bad table fails the DAG's parse, naming the key
        self.prices = prices
        from airflow_tfk._airflow.compat import deferrable_arg

        deferrable = deferrable_arg(deferrable)
        args.waiting_args(deferrable, progress_interval)
        args.name_prefix_arg(name_prefix)
        args.str_arg(tensorboard_task_id, "tensorboard_task_id", max_len=250)
        self.cleanup = Cleanup(choice(Cleanup, cleanup, "cleanup"))
        self.backend = backend_kind(self.backend).value  # stored as its text: it serialises with the DAG
        if on_failure not in ("delete", "keep"):
            raise ValueError(f"on_failure: must be 'delete' or 'keep' (got {on_failure!r})")
        self.on_failure = on_failure
        self.previous_run_policy = previous_run_policy
        self.tensorboard_task_id = tensorboard_task_id
        if not isinstance(previous_run_policy, str):
            raise ValueError(
                f"previous_run_policy: must be a string, one of allow, kill_previous, skip, wait "
                f"(got {previous_run_policy!r})"
            )
        if "{{" not in previous_run_policy:
            _previous_run_policy(previous_run_policy)
        self.cluster_spec = cluster_spec
        self.deferrable = deferrable
        self.progress_interval = progress_interval
        self.stall_seconds = args.check_stall_seconds(stall_seconds, progress_interval=progress_interval)
        self.name_prefix = name_prefix
        self._handle: ClusterHandle | None = None
        self._created = False  # this try created or reattached to its cluster
        if not self.inlets and not self.outlets:
            # The data and model the spec names literally, so Airflow knows them at parse
            # time: a DAG scheduled on the model asset runs after each success.
            from airflow_tfk._airflow.assets import training_assets

            self.inlets, self.outlets = training_assets(cluster_spec)

    # -- the steps --------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_tfk._airflow.compat import AirflowTaskTimeout, TaskDeferred
        from airflow_tfk.operators._publish_names import check_downstream_publish
        from airflow_tfk.run.handle import ClusterHandle
        from airflow_tfk.run.lifecycle import (
            apply_previous_run_policy,
            create_or_reattach,
        )
        from airflow_tfk.run.wait import TIMEOUT_MESSAGE, Wait, run_blocking, wait_result

        identity, spec, backend = self._resolve(context)
        check_downstream_publish(self, spec)
        if spec.budget is not None and spec.budget.cost is not None and self._prices() is None:
            from airflow_tfk.core.errors import SpecError

            raise SpecError(
                "budget.cost",
                "needs a price table: [tfk] prices in Airflow's configuration (or the operator's prices)",
                spec.budget.cost,
            )
        handle = ClusterHandle.for_spec(spec, backend, identity)
        wait_limit = self.execution_timeout.total_seconds() if self.execution_timeout else None
        policy = _previous_run_policy(self.previous_run_policy)
        if self.deferrable and policy.value == "wait":
            self._defer_while_previous_runs(backend, spec, identity)
        if not apply_previous_run_policy(
            backend, spec, identity, policy, self.log.info, wait_timeout=wait_limit
        ):
            from airflow_tfk._airflow.compat import AirflowSkipException

            raise AirflowSkipException(
                "an earlier run of this training is still alive (previous_run_policy=skip)"
            )
        # The handle carries this task instance as owner: on_kill or a failure during the
        # create deletes the cluster only if it is this task instance's (never one that
        # create_or_reattach refused as another's).
        self._handle = handle
        try:
            create_or_reattach(backend, spec, identity, self.log.info)
            self._created = True
            if self.deferrable:
                self._defer(handle, self._forecasts(context, spec))
            wait = Wait.of_handle(
                handle,
                backend,
                progress_interval=self.progress_interval,
                emit=self.log.info,
                stall_seconds=self.stall_seconds,
                forecasts=tuple(self._forecasts(context, spec)),
            )
            verdict = run_blocking(wait.run())
        except TaskDeferred:
            raise
        except AirflowTaskTimeout as exc:
            # Airflow's own exception says only "Timeout, PID: N": say what the deferred
            # wait says, after the same clean-up.
            self._teardown(handle, TIMEOUT_MESSAGE)
            raise AirflowTaskTimeout(f"cluster {handle.ref.name}: {TIMEOUT_MESSAGE}") from exc
        except BaseException:
            # SIGTERM-driven exits and every other error: nothing may be left.
            self._teardown(handle, "the task stopped before the training finished")
            raise
        return self._record(context, self._finish(handle, wait_result(verdict)))

    def _defer(
        self, handle: ClusterHandle, forecasts: Sequence[Forecast] = (), deadline: float | None = None
    ) -> None:
        """Wait in the triggerer. ``forecasts`` and ``deadline``: a wait resumed for a
        forecast's callback goes on with the same ones."""
        from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

        timeout = None
        if self.execution_timeout is not None:
            if deadline is None:
                deadline = time.time() + self.execution_timeout.total_seconds()
            timeout = timedelta(seconds=max(0.0, deadline - time.time())) + _DEFER_TIMEOUT_MARGIN
        self.defer(
            trigger=TFClusterDoneTrigger.for_handle(
                handle,
                deadline=deadline,
                progress_interval=self.progress_interval,
                release_after_success=True,
                stall_seconds=self.stall_seconds,
                forecasts=[f.to_dict() for f in forecasts] or None,
            ),
            method_name="execute_complete",
            kwargs={"handle": handle.to_dict(), "deadline": deadline},
            timeout=timeout,
        )

    def _forecasts(self, context: Context, spec: TFClusterSpec) -> list[Forecast]:
        """This run's forecasts: of its deadline (the earlier of the ``execution_timeout``,
        from the task's start, and ``max_duration_seconds``, from now, after the create: a
        reattached cluster's own age is not read), and of each cap of its ``budget``
        (held since now). Deferred, a forecast with a callback to run hands its alert to
        the task."""
        from airflow_tfk.run.forecast import DeadlineForecast, budget_forecasts, run_deadline
        from airflow_tfk.spec.capacity import cluster_requests

        out: list[Forecast] = []
        deadline = None
        if self.execution_timeout is not None:
            ti = context.get("ti")
            start = getattr(ti, "start_date", None)
            began = start.timestamp() if start is not None else time.time()
            deadline = began + self.execution_timeout.total_seconds()
        max_duration = spec.max_duration_seconds
        found = run_deadline(deadline, time.time() + max_duration if max_duration else None)
        if found is not None:
            callback = self.on_deadline_forecast
            out.append(
                DeadlineForecast(
                    found[0],
                    found[1],
                    self.deadline_action,
                    self.log.info,
                    on_alert=(lambda info: callback(context, info)) if callback is not None else None,
                    hand_over=self.deferrable and callback is not None,
                )
            )
        if spec.budget is not None:
            hold = cluster_requests(spec)  # every task's requests
            out += budget_forecasts(spec.budget, hold, self._prices(), time.time(), self.log.info)
        return out

    def _prices(self) -> Prices | None:
        """The price table: the operator's ``prices``, else ``[tfk] prices``."""
        from airflow_tfk.run.usage import Prices

        if self.prices is not None:
            return Prices.parse(self.prices)
        from airflow_tfk._airflow.platform_config import prices

        return prices()

    def _defer_while_previous_runs(self, backend: Any, spec: TFClusterSpec, identity: Any) -> None:
        """``previous_run_policy='wait'``, deferred: wait in the triggerer, not in a worker
        slot, until the earlier run's cluster has finished or is gone; then start again
        (:meth:`execute_after_previous_run`), which looks for the next earlier run."""
        from airflow_tfk.run.lifecycle import previous_runs
        from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

        alive = previous_runs(backend, spec, identity)
        if not alive:
            return
        self.log.info("waiting (deferred) for the earlier run's cluster %s to finish", alive[0].name)
        trigger = TFClusterDoneTrigger(
            cluster=alive[0].to_dict(),
            backend_kind=backend.kind,
            backend_config=backend.config(),
            mode=spec.mode.value,
            replicas={role: r.replicas for role, r in spec.roles().items()},
            deadline=time.time() + self.execution_timeout.total_seconds() if self.execution_timeout else None,
            progress_interval=self.progress_interval,
            delete_on_kill=False,  # another run's cluster: never this task's to delete
        )
        self.defer(trigger=trigger, method_name="execute_after_previous_run")

    def execute_after_previous_run(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """The earlier run's cluster finished (or is gone): start this run."""
        if event.get("status") == "timeout":
            from airflow_tfk._airflow.compat import AirflowTaskTimeout

            raise AirflowTaskTimeout(
                f"earlier runs still training at the execution_timeout: {event.get('cluster')}"
            )
        return self.execute(context)

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any],
        handle: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        from airflow_tfk.run.handle import ClusterHandle

        if handle is None:
            # `airflow dags test` (3.3) resumes with the event only, dropping the defer
            # kwargs; the handle is deterministic, so build it again.
            handle = self._handle_of(context).to_dict()
        h = ClusterHandle.from_dict(handle)
        self._handle = h
        self._created = True
        if event.get("status") == "forecast":
            event = self._on_forecast(context, h, event, deadline)
        return self._record(context, self._finish(h, event))

    def _on_forecast(
        self, context: Context, handle: ClusterHandle, event: dict[str, Any], deadline: float | None
    ) -> dict[str, Any]:
        """The triggerer's forecast of a missed deadline: run the DAG's callback here, then
        stop the run (``checkpoint_and_stop``: the failed event to finish with) or wait
        again, every forecast as the trigger left it (the one that alerted stays alerted;
        a run that speeds up clears it)."""
        from airflow_tfk.run.forecast import from_state, stop_verdict
        from airflow_tfk.run.wait import wait_result

        info = dict(event.get("forecast") or {})
        self.log.info("%s", info.get("message", event.get("message", "")))
        if self.on_deadline_forecast is not None:
            try:
                self.on_deadline_forecast(context, info)
            except Exception as exc:  # a callback's failure is the DAG's, not the wait's
                self.log.warning("the deadline forecast's callback failed: %s: %s", type(exc).__name__, exc)
        if info.get("action") == "checkpoint_and_stop":
            self.log.info(
                "stopping the training now with a checkpoint (deadline_action='checkpoint_and_stop')"
            )
            return wait_result(stop_verdict(info))
        self._defer(handle, [from_state(f) for f in event.get("forecasts") or ()], deadline)
        raise AssertionError("defer returns only by raising")  # pragma: no cover

    def _record(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        """The model outlets' events carry the exported version, metrics and run."""
        from airflow_tfk._airflow.asset_events import record_training

        self._lineage_result = result
        filled = record_training(context, self.outlets, result)
        if filled:
            self.log.info(
                "asset event(s) for %s carry version %s", ", ".join(filled), result.get("model_version")
            )
        return result

    def _resolve(self, context: Context) -> tuple[Any, TFClusterSpec, Any]:
        """Identity, validated spec and backend of this task instance (deterministic, so a
        resumed or retried task finds the same cluster)."""
        from airflow_tfk.run.lifecycle import resolve_spec

        identity = identity_from_context(context)
        options = self.backend_options()
        spec = resolve_spec(self.cluster_spec, identity, self.name_prefix)
        backend = self.make_backend(**options)
        return identity, spec, backend

    def _handle_of(self, context: Context) -> ClusterHandle:
        from airflow_tfk.run.handle import ClusterHandle

        identity, spec, backend = self._resolve(context)
        return ClusterHandle.for_spec(spec, backend, identity)

    def _finish(self, handle: ClusterHandle, result: dict[str, Any]) -> dict[str, Any]:
        """The task's outcome of a finished wait (:func:`~airflow_tfk.run.wait.wait_result`
        or the trigger's event): clean up after success, or tear down and raise."""
        from airflow_tfk.run.ending import Remove, RunResult, end_run
        from airflow_tfk.run.usage import Usage
        from airflow_tfk.run.wait import failure_of

        message = str(result.get("message", ""))
        error = failure_of(result, handle.ref.name)
        if error is not None:
            keep = (
                self.on_failure == "keep"
                and result.get("status") == "failed"
                and bool(result.get("failed_task"))
            )
            self._teardown(handle, message, keep=keep)
            from airflow_tfk._airflow.compat import airflow_error

            raise airflow_error(error)
        self.log.info("training succeeded: %s", message)
        started = time.monotonic()
        results = self._results(handle)
        grace = max(0.0, handle.ps_grace_seconds - (time.monotonic() - started))
        released = result.get("released")
        if released is not None:  # the trigger ended them already, without waiting for this resume
            self.log.info("the triggerer ended %s after the success", ", ".join(released) or "nothing")
        try:
            ended = end_run(
                handle,
                f"the training succeeded (cleanup={self.cleanup.value})",
                result=RunResult.ACCEPTED,
                remove=Remove.ALL if self.cleanup is Cleanup.ALL else Remove.LEFTOVERS,
                emit=self.log.info,
                grace_seconds=grace,
                released=tuple(released or ()),
            )
        except BaseException:
            self._teardown(handle, "clean-up after success was interrupted")
            raise
        self._handle = None
        usage = self._report_usage(Usage.from_event(result["usage"]) if "usage" in result else ended.usage)
        return {**handle.to_dict(), "outcome": "succeeded", **results, **usage}

    def _report_usage(self, usage: Usage | None) -> dict[str, Any]:
        """Log the run's usage (and cost, when priced); the XCom's ``usage``."""
        if usage is None or not usage.tasks:
            return {}
        try:
            prices = self._prices()
        except Exception as exc:  # a bad table costs the money figure, not the run
            self.log.warning("usage without a cost: %s", exc)
            prices = None
        self.log.info("%s", usage.summary(prices))
        return {"usage": usage.to_dict(prices)}

    def _results(self, handle: ClusterHandle) -> dict[str, Any]:
        """after_train's metrics, the evaluator's last metrics and the exported version,
        from the tasks' logs, for XCom and one summary line. The evaluator gets the grace
        period to evaluate the last checkpoint. Best effort: never fails the task."""
        from airflow_tfk.run.results import collect_results

        try:
            results = collect_results(
                handle.backend(),
                handle.ref,
                handle.replicas,
                evaluator_wait=max(handle.ps_grace_seconds, _EVALUATOR_MIN_WAIT),
            )
        except Exception as exc:
            self.log.warning("could not read the training's results: %s", exc)
            return {}
        if results.evaluator_error:
            self.log.warning("the evaluator failed (the training did not): %s", results.evaluator_error)
        self.log.info("%s", results.summary())
        return results.to_xcom()

    def get_openlineage_facets_on_start(self) -> Any:
        """Data in, model out, the cluster's shape and image (the ``openlineage`` provider
        calls this; without it nothing here is imported)."""
        from airflow_tfk._airflow.lineage import training_lineage

        return training_lineage(self, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """As at start, plus the exported version and metrics on the model dataset."""
        from airflow_tfk._airflow.lineage import training_lineage

        return training_lineage(self, getattr(self, "_lineage_result", None))

    def _teardown(self, handle: ClusterHandle, why: str, keep: bool = False) -> None:
        from airflow_tfk.run.ending import Remove, end_run

        try:
            ended = end_run(
                handle,
                f"deleted by its own task: {why}",
                remove=Remove.KEEP_FAILED if keep else Remove.ALL,
                emit=self.log.info,
            )
            self._report_usage(ended.usage)
            if ended.gone:
                # Never created (a pre-flight check failed, a rolled-back create), or
                # deleted by someone else since (kill_previous of a newer run).
                if self._created:
                    self.log.info("cluster %s is already gone (%s); nothing to delete", handle.ref.name, why)
                else:
                    self.log.info("cluster %s was not created; nothing to delete", handle.ref.name)
        except Exception:
            self.log.exception(
                "could not end cluster %s; delete it by label %s",
                handle.ref.name,
                handle.ref.label_selector,
            )
        self._handle = None

    def on_kill(self) -> None:
        """Mark-failed, ``dagrun_timeout`` and ``execution_timeout`` land here."""
        if self._handle is not None:
            self._teardown(self._handle, "the task was killed")


def _previous_run_policy(value: str) -> Any:
    from airflow_tfk.spec.run_policy import PreviousRunPolicy

    try:
        return PreviousRunPolicy(value)
    except ValueError:
        raise ValueError(
            f"previous_run_policy: must be one of "
            f"{', '.join(p.value for p in PreviousRunPolicy)} (got {value!r})"
        ) from None
