"""`TFPublishModelOperator`: publish an exported SavedModel version to TF Serving, safely.

Adds the version to the model's version policy, waits until TF Serving reports it
AVAILABLE, smoke-tests ``:predict`` with the sample request the training app exported,
then makes it the serving version; if it does not load or answer, the policy is rolled
back and the task fails, with the previous version still serving. Import-light: the
Kubernetes client, TensorFlow and Jinja2 load only when the task runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.constants import BackendKind, backend_kind
from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators._context import identity_from_context
from airflow_tfk.operators._on_backend import OnBackendOperator
from airflow_tfk.spec import operator_options as args

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tfk.operators._approval import HumanApproval


class TFPublishModelOperator(OnBackendOperator):
    """Publish one version of a model to TensorFlow Serving.

    :param model_name: the model (``/v1/models/NAME``; directory under the model store). (templated)
    :param claim: PVC of the model store (the training's ``models`` volume); with the
        local backend, the local backend's stand-in for that claim. (templated)
    :param sub_path: directory inside the claim holding ``<model_name>/<version>/``. (templated)
    :param base_path: local backend only, instead of ``claim``: a directory holding
        ``<model_name>/<version>/``. (templated)
    :param version: the version to publish; default: the version an upstream training
        task of this run exported (its XCom's ``export``, for this ``model_name``), else
        the newest exported one; ``"latest"``: the newest exported one. (templated)
    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options (a training's ``backend_config`` works). (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :param serving: further :class:`~airflow_tfk.serving.spec.ServingSpec` fields (image,
        replicas, rest_port, grpc_port, resources, keep_versions, namespace,
        load_timeout_seconds...). (templated)
    :param sample_request: the smoke ``:predict`` body; default: the one the training app
        exported with the version (``assets.extra/tfk_sample_request.json``). (templated)
    :param quality_gate: publish only a "blessed" version: ``thresholds`` (metric ->
        minimum; maximum for the metrics in ``lower_is_better``), ``max_regression`` (how
        much worse than the serving version's recorded metrics, one number or per metric),
        ``on_failure`` (``fail``, the default, or ``skip``). See
        :class:`~airflow_tfk.serving.gate.QualityGate`. (templated)
    :param metrics: the candidate's metrics (a mapping or its JSON text); default: the
        ``metrics`` of the upstream training task whose XCom exported the version, else the
        ``tfk_metrics.json`` the training app exported with it. Recorded next to the model
        config when published. (templated)
    :param approval: a person approves before exposure: ``true`` or ``{timeout_seconds,
        poll_seconds, subject}``. After the gate and the candidate's smoke test, the task
        asks through Airflow's human-in-the-loop records (candidate's metrics against the
        serving version's) and promotes only on ``Approve``; ``Reject`` or no answer rolls
        back, and the task fails. See :mod:`airflow_tfk.operators._approval`.
    :return: (XCom) ``model_name``, ``version``, ``previous_version``, ``endpoint`` (REST
        URL of the serving version; on Kubernetes through the API server's service proxy),
        ``predict_url``, ``kept_versions``, ``backend``.
    """

    template_fields: Sequence[str] = (
        "model_name",
        "claim",
        "sub_path",
        "base_path",
        "version",
        "backend_config",
        "serving",
        "sample_request",
        "quality_gate",
        "metrics",
    )
    ui_color = "#ffa000"

    def __init__(
        self,
        *,
        model_name: str,
        claim: str | None = None,
        sub_path: str = "",
        base_path: str | None = None,
        version: int | str | None = None,
        serving: Mapping[str, Any] | None = None,
        sample_request: dict[str, Any] | None = None,
        quality_gate: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | str | None = None,
        approval: bool | Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        backend_kind(self.backend)
        self.approval: HumanApproval | None = None
        if approval is not None and approval is not False:
            # Most publishes ask no one: their DAGs parse without the approval module.
            from airflow_tfk.operators._approval import HumanApproval

            self.approval = HumanApproval.from_option(approval)
        args.str_arg(model_name, "model_name")
        for field, value in (("claim", claim), ("base_path", base_path)):
            args.str_arg(value, field, optional=True)
        args.str_arg(sub_path, "sub_path")
        if isinstance(version, bool) or not (version is None or isinstance(version, (int, str))):
            raise SpecError("version", "must be an integer version, 'latest' or None", version)
        _options(serving, sample_request, quality_gate, metrics)
        self.model_name = model_name
        self.claim = claim
        self.sub_path = sub_path
        self.base_path = base_path
        self.version = version
        self.serving = serving
        self.sample_request = sample_request
        self.quality_gate = quality_gate
        self.metrics = metrics
        self._upstream_metrics: dict[str, Any] | None = None
        if not self.inlets and not self.outlets:
            from airflow_tfk._airflow.assets import publish_assets

            self.inlets, self.outlets = publish_assets(
                model_name, claim, sub_path, base_path, serving, self.backend
            )

    def spec(self) -> Any:
        """The validated :class:`ServingSpec` (raises ``SpecError`` naming the field)."""
        from airflow_tfk.core.errors import SpecError
        from airflow_tfk.serving.spec import ServingSpec

        extra = dict(self.serving or {})
        clash = sorted({"model_name", "claim", "sub_path", "base_path"} & set(extra))
        if clash:
            raise SpecError(f"serving.{clash[0]}", "is an operator parameter; pass it directly")
        return ServingSpec.from_dict(
            {
                "model_name": self.model_name,
                "claim": self.claim,
                "sub_path": self.sub_path or "",
                "base_path": self.base_path,
                **extra,
            }
        )

    def _version(self) -> int | None:
        from airflow_tfk.core.errors import SpecError
        from airflow_tfk.protocol.digits import MAX_VERSION, model_version

        if self.version in (None, "", "None", "latest"):
            return None
        text = str(self.version).strip()
        # A templated version arrives as text; 3.9 or "3.0" is not a version (int() would
        # quietly publish 3), nor are non-ASCII digits.
        if isinstance(self.version, float) or not (text.isascii() and text.lstrip("+").isdigit()):
            raise SpecError("version", "must be an integer version", self.version)
        if isinstance(self.version, bool):
            raise SpecError("version", "must be a non-negative integer", self.version)
        version = model_version(text.lstrip("+"))
        if version is None:
            # TF Serving's versions are int64
            raise SpecError(
                "version", f"must be at most {MAX_VERSION} (int64, TF Serving's version type)", self.version
            )
        return version

    def gate(self) -> Any:
        """The validated :class:`QualityGate`, or None (raises ``SpecError`` naming the field)."""
        from airflow_tfk.serving.gate import QualityGate

        return None if self.quality_gate in (None, {}) else QualityGate.from_dict(self.quality_gate)

    def _metrics(self) -> dict[str, Any] | None:
        import json

        from airflow_tfk.core.errors import SpecError

        found: Any = self.metrics
        if found in (None, "", "None"):
            return None
        if isinstance(found, str):
            try:
                found = json.loads(found)
            except ValueError:
                raise SpecError("metrics", "must be a mapping or its JSON text", found) from None
        if not isinstance(found, Mapping):
            raise SpecError("metrics", "must be a mapping metric -> value", found)
        args.plain(found, "metrics")  # JSON text may say 1e400 (inf)
        return dict(found)

    def _upstream_version(self, context: Context) -> int | None:
        """The version of ``model_name`` that an upstream training task of this run
        exported (from its XCom), so another run's newer version is never published."""
        ti = context["ti"]
        found: dict[int, str] = {}
        for task_id in sorted(self.upstream_task_ids):
            value = ti.xcom_pull(task_ids=task_id)
            export = value.get("export") if isinstance(value, dict) else None
            if isinstance(export, dict) and export.get("model_name") == self.model_name:
                found[int(export["version"])] = task_id
                # the same training's metrics are the quality gate's candidate metrics
                metrics = value.get("metrics") if isinstance(value, dict) else None
                self._upstream_metrics = dict(metrics) if isinstance(metrics, Mapping) else None
        if len(found) > 1:
            from airflow_tfk.core.errors import SpecError

            raise SpecError(
                "version", f"upstream tasks exported several versions of {self.model_name}", found
            )
        if found:
            version, task_id = next(iter(found.items()))
            self.log.info("publishing version %s, exported by %s in this run", version, task_id)
            return version
        from airflow_tfk._airflow.asset_events import triggering_model_event

        event = triggering_model_event(context, self.model_name)
        if event is not None:  # a run scheduled on the model asset publishes what it announced
            self.log.info("publishing version %s, announced by the model asset event", event["version"])
            metrics = event.get("metrics")
            self._upstream_metrics = dict(metrics) if isinstance(metrics, Mapping) and metrics else None
            return int(event["version"])
        self.log.info("no upstream training exported %s: publishing the newest version", self.model_name)
        return None

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_tfk.serving.targets import get_serving_target

        _options(self.serving, self.sample_request, self.quality_gate, self.metrics, rendered=True)
        spec = self.spec()
        version = self._version()
        gate, metrics = self.gate(), self._metrics()
        self._upstream_metrics = None
        if version is None and self.version in (None, "", "None"):
            version = self._upstream_version(context)
            if metrics is None and self._upstream_metrics:
                metrics = self._upstream_metrics
                self.log.info("candidate metrics from the training (its XCom or model event): %s", metrics)
        config = self.backend_options()
        if self.backend == BackendKind.KUBERNETES:
            config["identity"] = identity_from_context(context)
        target = self.bound(get_serving_target(self.backend, spec, **config))
        approve = None
        if self.approval is not None:
            from airflow_tfk.operators._approval import request_approval

            approve = request_approval(context, self.approval, self.log.info)
        return self._publish(context, target, version, gate, metrics, approve)

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
        from airflow_tfk.serving.base import NotBlessed
        from airflow_tfk.serving.publish import AwaitApproval, publish

        try:
            result = publish(
                target,
                version,
                self.sample_request,
                emit=self.log.info,
                gate=gate,
                metrics=metrics,
                approve=approve,
                fence=fence,
            )
        except AwaitApproval as wait:
            from airflow_tfk.operators._approval import park

            assert self.approval is not None  # only its callback raises AwaitApproval
            park(self, context, wait.request, self.approval)
            raise  # park raised; for the type checker
        except NotBlessed as exc:
            if exc.on_failure == "skip":
                raise AirflowSkipException(str(exc)) from exc
            raise
        from airflow_tfk._airflow.asset_events import record_publish

        out = result.to_dict()
        self._lineage_result = {**out, "metrics": metrics or {}}
        record_publish(context, self.outlets, self._lineage_result)
        return out

    def execute_approved(
        self, context: Context, event: dict[str, Any], request: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The person's answer: promote the waiting candidate, or withdraw it."""
        from airflow_tfk.operators._approval import approved
        from airflow_tfk.serving.publish import NotApproved, same_files, withdraw_candidate
        from airflow_tfk.serving.targets import get_serving_target

        if request is None:
            raise NotApproved("resumed without the approval request; the candidate is not promoted")
        config = self.backend_options()
        if self.backend == BackendKind.KUBERNETES:
            config["identity"] = identity_from_context(context)
        target = self.bound(get_serving_target(self.backend, self.spec(), **config))
        yes, why = approved(event)
        self.log.info("approval of %s version %s: %s", request["model_name"], request["version"], why)
        if not yes:
            withdraw_candidate(target, self.log.info)
            raise NotApproved(
                f"{request['model_name']} version {request['version']} was not published: {why}"
            )
        metrics = request.get("metrics") or None
        approve = same_files(request)
        # A resumed execution can be failed by the scheduler while it runs (the parked
        # execution's late exit: issue 35): nothing moves unless Airflow holds it running,
        # and a promotion Airflow did not keep is undone.
        from airflow_tfk.operators._approval import require_running

        def fence() -> None:
            require_running(context, "the approved version is not promoted")

        try:
            fence()
        except NotApproved:
            withdraw_candidate(target, self.log.info)
            raise
        out = self._publish(context, target, int(request["version"]), self.gate(), metrics, approve, fence)
        _undo_unless_running(context, target, out, self.log.info)
        return out

    def get_openlineage_facets_on_start(self) -> Any:
        """The model in, the serving model out (the ``openlineage`` provider calls this;
        without it nothing here is imported)."""
        from airflow_tfk._airflow.lineage import publish_lineage

        return publish_lineage(self, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """As at start, plus the version that serves, its metrics and endpoint."""
        from airflow_tfk._airflow.lineage import publish_lineage

        return publish_lineage(self, getattr(self, "_lineage_result", None))


class TFStopModelServerOperator(OnBackendOperator):
    """Stop a model's TF Serving: the local model server process (the local backend), or
    its Deployment, Service and ConfigMaps (Kubernetes). The model store is left alone.
    Use it as a teardown of a DAG that published to a server it should not leave running.

    :param model_name: the model whose server to stop. (templated)
    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options (a training's ``backend_config`` works). (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :param serving: the :class:`~airflow_tfk.serving.spec.ServingSpec` fields that name the
        server: ``name``, ``namespace``. (templated)
    """

    template_fields: Sequence[str] = ("model_name", "backend_config", "serving")
    ui_color = "#ffccbc"

    def __init__(
        self,
        *,
        model_name: str,
        serving: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("task_id", "stop_model_server")
        super().__init__(**kwargs)
        backend_kind(self.backend)
        args.str_arg(model_name, "model_name")
        args.mapping_arg(serving, "serving")
        self.model_name = model_name
        self.serving = serving

    def execute(self, context: Context) -> None:
        from airflow_tfk.core.errors import SpecError
        from airflow_tfk.serving.spec import ServingSpec
        from airflow_tfk.serving.targets import get_serving_target

        _options(self.serving, None, None, None, rendered=True)
        extra = dict(self.serving or {})
        unknown = sorted(set(extra) - {"name", "namespace"})
        if unknown:
            raise SpecError(f"serving.{unknown[0]}", "only name and namespace name the server to stop")
        # the claim only satisfies the spec's rules: stopping never touches the store
        spec = ServingSpec(model_name=self.model_name, claim="unused", **extra)
        config = self.backend_options()
        target = self.bound(get_serving_target(self.backend, spec, **config))
        target.delete(self.log.info)


def _options(
    serving: object, sample_request: object, quality_gate: object, metrics: object, *, rendered: bool = False
) -> None:
    """The mapping arguments of the serving operators: plain data, naming the argument.
    ``rendered``: Airflow rendered them, so a Jinja string left is text, not a mapping."""
    for field, value in (
        ("serving", serving),
        ("sample_request", sample_request),
        ("quality_gate", quality_gate),
    ):
        if rendered and args.templated(value):
            raise SpecError(field, "must be a mapping (it rendered to text)", value)
        args.mapping_arg(value, field)
    if not isinstance(metrics, str):  # a mapping, or its JSON text (parsed when used)
        args.mapping_arg(metrics, "metrics")


def _undo_unless_running(context: Any, target: Any, out: Mapping[str, Any], emit: Any) -> None:
    """After the label moved: if Airflow no longer holds the task as running (its success
    will be refused), put the label back and fail, so what serves matches Airflow's record."""
    from airflow_tfk.operators._approval import require_running
    from airflow_tfk.serving.publish import NotApproved, withdraw_version

    try:
        require_running(context, "the promotion is undone")
    except NotApproved:
        withdraw_version(target, int(out["version"]), out.get("previous_version"), emit)
        raise
