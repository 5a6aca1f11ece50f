"""What a TF Serving deployment must offer for the publish algorithm to drive it.

Implemented twice: :class:`~airflow_tfk.serving.local.LocalServing` (a local process) and
:class:`~airflow_tfk.serving.kubernetes.KubernetesServing` (Deployment + Service +
ConfigMap, reached through the API server's service proxy). Only these talk to the
outside world; :mod:`airflow_tfk.serving.publish` is pure logic over this interface.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_tfk.protocol.model_config import ModelServerConfig
from airflow_tfk.serving.spec import ServingSpec

Emit = Callable[[str], None]


class ServingError(RuntimeError):
    """Publishing a model version failed; the serving version was left in place."""


class PredictError(ServingError):
    """A ``:predict`` request was refused or could not be sent."""


class NotBlessed(ServingError):
    """The quality gate refused the version; nothing was published."""

    def __init__(self, message: str, failures: tuple[str, ...], on_failure: str) -> None:
        super().__init__(message)
        self.failures = failures
        self.on_failure = on_failure


@dataclass(frozen=True)
class VersionState:
    """One entry of TF Serving's ``model_version_status``."""

    version: int
    state: str
    error_code: str = "OK"
    error_message: str = ""

    @property
    def failed(self) -> bool:
        return self.state == "END" and self.error_code not in ("OK", "", None)

    @classmethod
    def from_status(cls, entry: dict[str, Any]) -> VersionState:
        status = entry.get("status") or {}
        return cls(
            int(entry.get("version", 0)),
            str(entry.get("state", "UNKNOWN")),
            str(status.get("error_code", "OK")),
            str(status.get("error_message", "")),
        )


def parse_status(body: Any, version: int) -> VersionState | None:
    """The entry of ``version`` in a ``GET /v1/models/...`` answer, if present."""
    if not isinstance(body, dict):
        return None
    for entry in body.get("model_version_status") or []:
        if isinstance(entry, dict) and str(entry.get("version")) == str(version):
            return VersionState.from_status(entry)
    return None


def model_path(model: str, version: int | None = None, label: str | None = None) -> str:
    """TF Serving's REST path of ``model``, of one version or label of it."""
    path = f"/v1/models/{model}"
    if version is not None:
        return f"{path}/versions/{version}"
    return f"{path}/labels/{label}" if label else path


class ServingTarget(abc.ABC):
    """One model's TF Serving deployment on some backend. Methods are idempotent.

    The REST conversation with TF Serving (status, labels, ``:predict``) is written here
    once; a backend says only how a request reaches the server (:meth:`_rest`)."""

    kind: str
    spec: ServingSpec
    status_timeout: float  # seconds for a status or label read

    @abc.abstractmethod
    def ensure(self, emit: Emit) -> None:
        """Create the server if it does not exist; never changes an existing model config."""

    def store_file(self, path: str, max_bytes: int) -> bytes:
        """The bytes of ``path`` (relative, checked by the caller) in the model store, beside
        the models' folders (e.g. an evaluation data set); raises :class:`ServingError`
        saying why not: missing, not a regular file, larger than ``max_bytes``, or resolving
        outside the store."""
        raise ServingError(f"the {self.kind} backend cannot read files of the model store")

    @abc.abstractmethod
    def read_config(self) -> ModelServerConfig | None:
        """The model config the server reads (None when there is none yet)."""

    @abc.abstractmethod
    def write_config(self, config: ModelServerConfig) -> None: ...

    @abc.abstractmethod
    def model_base_path(self) -> str:
        """``base_path`` of the model as the server sees it."""

    @abc.abstractmethod
    def exported_versions(self) -> list[int]:
        """Versions present in the model store, ascending."""

    @abc.abstractmethod
    def sample_request(self, version: int) -> dict[str, Any] | None:
        """The predict body the training app exported with ``version`` (None if none)."""

    @abc.abstractmethod
    def version_metrics(self, version: int) -> dict[str, Any] | None:
        """The metrics the training app exported with ``version``
        (``assets.extra/tfk_metrics.json``), None if none."""

    def export_info(self, version: int) -> dict[str, Any] | None:
        """What the training runtime recorded about ``version``'s export
        (``assets.extra/tfk_export.json``: the TensorFlow that wrote it), None if nothing."""
        return None

    def server_tensorflow(self) -> tuple[str | None, str]:
        """The model server's TensorFlow version (None: it cannot be told) and where that
        comes from, in words: by default the serving image's tag."""
        from airflow_tfk.serving.compat import image_tensorflow

        return image_tensorflow(self.spec.image), f"the serving image {self.spec.image}"

    def version_files(self, version: int) -> str | None:
        """A digest of the files of ``version`` in the model store as they are now (see
        :mod:`~airflow_tfk.serving.files`); None when this backend cannot tell or the
        version is not there. Raises :class:`OSError` when it cannot take one."""
        return None

    def files_as_read(self, version: int) -> str | None:
        """The digest of ``version``'s files that vouches for the metrics and sample request
        :meth:`version_metrics` and :meth:`sample_request` give: a backend that reads the
        store in one pass takes it in that pass, before those files; otherwise the files
        as they are now (the publish asks before it reads the metrics)."""
        return self.version_files(version)

    @abc.abstractmethod
    def published_metrics(self) -> dict[int, dict[str, Any]]:
        """The metrics recorded for each published version (the gate's baselines)."""

    @abc.abstractmethod
    def record_metrics(self, version: int, metrics: dict[str, Any]) -> None:
        """Record ``version``'s metrics as published, next to the model config."""

    def version_state(self, version: int, *, model: str | None = None) -> VersionState | None:
        """What the server reports for ``version`` of ``model`` (default: the spec's);
        None when unknown or unreachable."""
        try:
            status, body = self._rest(
                "GET", self._model_path(version, model=model), timeout=self.status_timeout
            )
        except OSError:
            return None
        return parse_status(body, version) if status == 200 else None

    #: whether :meth:`ensure` starts the server again after it has stopped (the local
    #: backend's process); on Kubernetes the Deployment restarts its own pods
    restartable = False

    def server_down(self) -> str | None:
        """Why the server is known not to run, None when it runs or the backend cannot
        tell: a publish stops waiting on a server that is gone."""
        return None

    def unreachable(self) -> str | None:
        """Why the last :meth:`version_state` got no answer from the server (None when it
        got one, or when the backend cannot tell): named in a load timeout."""
        return None

    def replicas(self) -> dict[str, ServingTarget]:
        """The servers that run now, by name, each one asked on its own (status, labels,
        ``:predict``): those that take client traffic and those about to (see
        :meth:`not_ready`). A backend with a single server answers itself, so the publish
        waits on exactly what clients reach either way."""
        return {self.kind: self}

    def not_ready(self) -> list[str]:
        """The replicas that run but take no client traffic yet (on Kubernetes: not Ready,
        their readiness probe waiting for the ``stable`` version); none for a backend whose
        server takes traffic as soon as it runs."""
        return []

    def label_version(self, label: str) -> int | None:
        """The version ``label`` resolves to on the server, None if it does not (yet)."""
        try:
            status, body = self._rest("GET", self._model_path(label=label), timeout=self.status_timeout)
        except OSError:
            return None
        entries = body.get("model_version_status") if isinstance(body, dict) else None
        return int(entries[0]["version"]) if status == 200 and entries else None

    def predict(
        self,
        body: dict[str, Any],
        *,
        version: int | None = None,
        label: str | None = None,
        timeout: float = 30.0,
        model: str | None = None,
        protocol: str = "rest",
    ) -> dict[str, Any]:
        """``:predict`` over REST, or ``Predict`` over gRPC (``protocol``), on ``model``
        (default: the spec's); raises :class:`PredictError` with the server's message."""
        if protocol == "grpc":
            return self._grpc_predict(body, version, label, timeout, model)
        try:
            status, answer = self._rest(
                "POST", self._model_path(version, label, model) + ":predict", body, timeout
            )
        except OSError as exc:
            raise PredictError(str(exc)) from exc
        if status != 200:
            detail = answer.get("error") or answer.get("message") if isinstance(answer, dict) else answer
            raise PredictError(f"predict answered HTTP {status}: {detail}")
        return answer

    def _model_path(
        self, version: int | None = None, label: str | None = None, model: str | None = None
    ) -> str:
        return model_path(model or self.spec.model_name, version, label)

    def _rest(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
        """(status, parsed JSON or text) of a request to TF Serving's REST ``path``; an HTTP
        error is an answer. Raises :class:`OSError` naming the URL when nothing answers.
        (A target that overrides the conversation itself - a test's fake - needs none.)"""
        raise NotImplementedError(f"{type(self).__name__} cannot send REST requests")

    def _grpc_predict(
        self, body: dict[str, Any], version: int | None, label: str | None, timeout: float, model: str | None
    ) -> dict[str, Any]:
        """:meth:`predict` over gRPC."""
        raise PredictError(f"gRPC predict is not available with the {self.kind} backend")

    @abc.abstractmethod
    def endpoint(self, label: str | None = None) -> str:
        """REST URL of the model (``.../v1/models/NAME[/labels/L]``)."""

    @abc.abstractmethod
    def delete(self, emit: Emit) -> None:
        """Stop the server and remove its objects (the model store is left alone)."""
