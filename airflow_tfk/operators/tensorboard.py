"""`TFStartTensorBoardOperator` and `TensorBoardLink`: TensorBoard over a training's logs, and a
button on the training task (and on this one) that opens it.

TensorBoard keeps running after the task (Kubernetes: a Deployment + Service reached
through the API server's service proxy; local: a ``tensorboard`` process on a free port);
``TFStopTensorBoardOperator`` (or ``action="stop"``) stops it. Import-light.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink

from airflow_tfk.core.constants import BackendKind, TensorBoardAction, backend_kind, choice
from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators._context import identity_from_context
from airflow_tfk.operators._on_backend import OnBackendOperator
from airflow_tfk.spec import operator_options as args

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import TaskInstanceKey

XCOM_KEY = "tensorboard"
DEFAULT_TASK_ID = "tensorboard"


class TensorBoardLink(BaseOperatorLink):
    """ "TensorBoard" button: the URL the TensorBoard task pushed (XCom ``tensorboard``).

    On the TensorBoard task itself it reads that task's XCom. On another task (the
    training) it reads the XCom of the task named by the operator's
    ``tensorboard_task_id`` attribute (default ``tensorboard``) in the same DAG run.
    Airflow 3 resolves links when a task finishes, so start TensorBoard alongside the
    training: it is up in seconds, long before the training ends.
    """

    name = "TensorBoard"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        if isinstance(operator, TFStartTensorBoardOperator):
            value = XCom.get_value(ti_key=ti_key, key=XCOM_KEY)
        else:
            task_id = getattr(operator, "tensorboard_task_id", None) or DEFAULT_TASK_ID
            dag = getattr(operator, "dag", None)
            if dag is not None and not dag.has_task(task_id):
                return ""  # no TensorBoard in this DAG: don't ask for an XCom that cannot exist
            value = XCom.get_one(key=XCOM_KEY, dag_id=ti_key.dag_id, run_id=ti_key.run_id, task_id=task_id)
        if isinstance(value, Mapping):
            return str(value.get("url") or "")
        return str(value or "")


class TFStartTensorBoardOperator(OnBackendOperator):
    """Start (or stop) a TensorBoard over a training's log directory.

    :param name: name of the Deployment/Service or local process; default derived from
        the DAG id. (templated)
    :param claim: PVC of the logs (the training's ``logs`` volume); with the local backend,
        the local backend's stand-in for that claim. (templated)
    :param sub_path: directory inside the claim. (templated)
    :param base_path: local backend only, instead of ``claim``: the log directory. (templated)
    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options. (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :param tensorboard: further :class:`~airflow_tfk.serving.spec.TensorBoardSpec` fields
        (image, port, namespace, resources, reload_seconds...). (templated)
    :param action: ``start`` (default) or ``stop``.
    :return: (XCom, also under key ``tensorboard``) ``name``, ``url``, ``backend``,
        ``backend_config``.
    """

    template_fields: Sequence[str] = (
        "name",
        "claim",
        "sub_path",
        "base_path",
        "backend_config",
        "tensorboard",
    )
    operator_extra_links = (TensorBoardLink(),)
    ui_color = "#ff8f00"

    def __init__(
        self,
        *,
        name: str | None = None,
        claim: str | None = None,
        sub_path: str = "",
        base_path: str | None = None,
        tensorboard: Mapping[str, Any] | None = None,
        action: TensorBoardAction | str = TensorBoardAction.START,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("task_id", DEFAULT_TASK_ID)
        super().__init__(**kwargs)
        kind = backend_kind(self.backend).value  # its text: it serialises with the DAG
        act = TensorBoardAction(choice(TensorBoardAction, action, "action"))
        for field, value in (("name", name), ("claim", claim), ("base_path", base_path)):
            args.str_arg(value, field, optional=True)
        args.str_arg(sub_path, "sub_path")
        args.mapping_arg(tensorboard, "tensorboard")
        self.name = name
        self.claim = claim
        self.sub_path = sub_path
        self.base_path = base_path
        self.backend = kind
        self.tensorboard = tensorboard
        self.action = act

    def spec(self, dag_id: str) -> Any:
        from airflow_tfk.serving.spec import TensorBoardSpec, default_name

        if args.templated(self.tensorboard):
            raise SpecError("tensorboard", "must be a mapping (it rendered to text)", self.tensorboard)
        args.mapping_arg(self.tensorboard, "tensorboard")

        return TensorBoardSpec.from_dict(
            {
                "name": self.name or default_name("tb", dag_id),
                "claim": self.claim,
                "sub_path": self.sub_path or "",
                "base_path": self.base_path,
                **dict(self.tensorboard or {}),
            }
        )

    def server(self, context: Context) -> Any:
        from airflow_tfk.tensorboard import get_tensorboard

        identity = identity_from_context(context)
        config = self.backend_options()
        if self.backend == BackendKind.KUBERNETES:
            config["identity"] = identity
        return self.bound(get_tensorboard(self.backend, self.spec(identity.dag_id), **config))

    def execute(self, context: Context) -> dict[str, Any] | None:
        server = self.server(context)
        if self.action is TensorBoardAction.STOP:
            server.stop(self.log.info)
            return None
        url = server.start(self.log.info)
        value = {
            "name": server.spec.name,
            "url": url,
            "backend": self.backend,
            "backend_config": server.config(),
        }
        context["ti"].xcom_push(key=XCOM_KEY, value=value)
        return value


class TFStopTensorBoardOperator(TFStartTensorBoardOperator):
    """Stop the TensorBoard a :class:`TFStartTensorBoardOperator` started (use it as a teardown)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("task_id", "stop_tensorboard")
        super().__init__(action="stop", **kwargs)
