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


class ServingTarget(abc.ABC):
    """One model's TF Serving deployment on some backend. Methods are idempotent."""

    kind: str
    spec: ServingSpec

    @abc.abstractmethod
    def ensure(self, emit: Emit) -> None:
        """Create the server if it does not exist; never changes an existing model config."""

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

    @abc.abstractmethod
    def published_metrics(self) -> dict[int, dict[str, Any]]:
        """The metrics recorded for each published version (the gate's baselines)."""

    @abc.abstractmethod
    def record_metrics(self, version: int, metrics: dict[str, Any]) -> None:
        """Record ``version``'s metrics as published, next to the model config."""

    @abc.abstractmethod
    def version_state(self, version: int, *, model: str | None = None) -> VersionState | None:
        """What the server reports for ``version`` of ``model`` (default: the spec's);
        None when unknown or unreachable."""

    def unreachable(self) -> str | None:
        """Why the last :meth:`version_state` got no answer from the server (None when it
        got one, or when the backend cannot tell): named in a load timeout."""
        return None

    @abc.abstractmethod
    def label_version(self, label: str) -> int | None:
        """The version ``label`` resolves to on the server, None if it does not (yet)."""

    @abc.abstractmethod
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

    @abc.abstractmethod
    def endpoint(self, label: str | None = None) -> str:
        """REST URL of the model (``.../v1/models/NAME[/labels/L]``)."""

    @abc.abstractmethod
    def delete(self, emit: Emit) -> None:
        """Stop the server and remove its objects (the model store is left alone)."""
