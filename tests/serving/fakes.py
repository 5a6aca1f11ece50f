"""An in-memory ServingTarget: a model server that applies each written config at once."""

from __future__ import annotations

from typing import Any

from airflow_tfk.protocol.model_config import ModelServerConfig
from airflow_tfk.serving.base import PredictError, ServingTarget, VersionState
from airflow_tfk.serving.spec import ServingSpec


class FakeServing(ServingTarget):
    """``behaviour[v]``: ok | fail_load | never | bad_predict | empty | wrong_count."""

    kind = "fake"

    def __init__(self, spec: ServingSpec, behaviour: dict[int, str]) -> None:
        self.spec = spec
        self.behaviour = behaviour
        self.config: ModelServerConfig | None = None
        self.writes: list[ModelServerConfig] = []
        self.ensured = 0
        self.exported_metrics: dict[int, dict[str, Any]] = {}
        self.recorded: dict[int, dict[str, Any]] = {}
        self.predicted: list[tuple[str, int | None]] = []  # (model, version) of each predict

    def ensure(self, emit) -> None:
        self.ensured += 1

    def read_config(self) -> ModelServerConfig | None:
        return self.config

    def write_config(self, config: ModelServerConfig) -> None:
        self.config = config
        self.writes.append(config)

    def model_base_path(self) -> str:
        return f"/models/{self.spec.model_name}"

    def exported_versions(self) -> list[int]:
        return sorted(self.behaviour)

    def sample_request(self, version: int) -> dict[str, Any] | None:
        return {"instances": [[1.0], [2.0]]}

    def version_metrics(self, version: int) -> dict[str, Any] | None:
        return self.exported_metrics.get(version)

    def published_metrics(self) -> dict[int, dict[str, Any]]:
        return dict(self.recorded)

    def record_metrics(self, version: int, metrics: dict[str, Any]) -> None:
        self.recorded[version] = dict(metrics)

    def _loaded(self, model: str | None = None) -> tuple[int, ...]:
        entry = self.config.get(model or self.spec.model_name) if self.config else None
        return entry.versions if entry else ()

    def version_state(self, version: int, *, model: str | None = None) -> VersionState | None:
        if version not in self._loaded(model):
            return None
        how = self.behaviour.get(version, "never")
        if how == "never":
            return None
        if how == "fail_load":
            return VersionState(version, "END", "DATA_LOSS", "corrupt saved_model.pb")
        return VersionState(version, "AVAILABLE")

    def label_version(self, label: str) -> int | None:
        model = self.config.get(self.spec.model_name) if self.config else None
        return model.labels.get(label) if model else None

    def predict(self, body, *, version=None, label=None, timeout=30.0, model=None, protocol="rest"):
        self.predicted.append((model or self.spec.model_name, version))
        if label is not None:
            version = self.label_version(label)
        how = self.behaviour.get(version)
        if how == "bad_predict":
            raise PredictError("predict answered HTTP 400: wrong shape")
        if how == "empty":
            return {"predictions": []}
        if how == "wrong_count":
            return {"predictions": [[1.0]]}
        return {"predictions": [[float(version)]] * len(body["instances"])}

    def endpoint(self, label: str | None = None) -> str:
        return f"fake://{self.spec.model_name}" + (f"/labels/{label}" if label else "")

    def delete(self, emit) -> None:
        self.config = None
