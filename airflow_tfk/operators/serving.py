"""`PublishModelOperator`: publish an exported SavedModel version to TF Serving, safely.

Adds the version to the model's version policy, waits until TF Serving reports it
AVAILABLE, smoke-tests ``:predict`` with the sample request the training app exported,
then makes it the serving version; if it does not load or answer, the policy is rolled
back and the task fails, with the previous version still serving. Import-light: the
Kubernetes client, TensorFlow and Jinja2 load only when the task runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_tfk.operators._context import backend_config, identity_from_context

if TYPE_CHECKING:
    from airflow.sdk import Context


class PublishModelOperator(BaseOperator):
    """Publish one version of a model to TensorFlow Serving.

    :param model_name: the model (``/v1/models/NAME``; directory under the model store). (templated)
    :param claim: PVC of the model store (the training's ``models`` volume); with the
        local backend, the local backend's stand-in for that claim. (templated)
    :param sub_path: directory inside the claim holding ``<model_name>/<version>/``. (templated)
    :param base_path: local backend only, instead of ``claim``: a directory holding
        ``<model_name>/<version>/``. (templated)
    :param version: the version to publish; default: the newest exported one. (templated)
    :param backend: ``kubernetes`` (default) or ``local``.
    :param backend_config: backend options (a training's ``backend_config`` works). (templated)
    :param kubernetes_conn_id: the cncf ``kubernetes`` connection.
    :param serving: further :class:`~airflow_tfk.serving.spec.ServingSpec` fields (image,
        replicas, rest_port, grpc_port, resources, keep_versions, namespace,
        load_timeout_seconds...). (templated)
    :param sample_request: the smoke ``:predict`` body; default: the one the training app
        exported with the version (``assets.extra/tfk_sample_request.json``). (templated)
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
        backend: str = "kubernetes",
        backend_config: dict[str, Any] | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        serving: Mapping[str, Any] | None = None,
        sample_request: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if backend not in ("kubernetes", "local"):
            raise ValueError(f"backend: must be 'kubernetes' or 'local' (got {backend!r})")
        self.model_name = model_name
        self.claim = claim
        self.sub_path = sub_path
        self.base_path = base_path
        self.version = version
        self.backend = backend
        self.backend_config = backend_config
        self.kubernetes_conn_id = kubernetes_conn_id
        self.serving = serving
        self.sample_request = sample_request

    def spec(self) -> Any:
        """The validated :class:`ServingSpec` (raises ``SpecError`` naming the field)."""
        from airflow_tfk.errors import SpecError
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
        from airflow_tfk.errors import SpecError

        if self.version in (None, "", "None", "latest"):
            return None
        text = str(self.version).strip()
        # A templated version arrives as text; 3.9 or "3.0" is not a version (int() would
        # quietly publish 3), nor are non-ASCII digits.
        if isinstance(self.version, float) or not (text.isascii() and text.lstrip("+").isdigit()):
            raise SpecError("version", "must be an integer version", self.version)
        if len(text) > 18:
            raise SpecError("version", "is too large for a model version", self.version)
        version = int(text)
        if version < 0 or isinstance(self.version, bool):
            raise SpecError("version", "must be a non-negative integer", self.version)
        return version

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_tfk.serving.publish import publish
        from airflow_tfk.serving.targets import get_serving_target

        spec = self.spec()
        version = self._version()
        config = backend_config(self.backend, self.backend_config, self.kubernetes_conn_id)
        if self.backend == "kubernetes":
            config["identity"] = identity_from_context(context)
        target = get_serving_target(self.backend, spec, **config)
        result = publish(target, version, self.sample_request, emit=self.log.info)
        return result.to_dict()
