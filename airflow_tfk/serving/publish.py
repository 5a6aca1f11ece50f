"""The publish algorithm, once for every backend.

1. add the new version to the version policy, next to the serving one;
2. wait (bounded) until ``GET /v1/models/NAME/versions/V`` reports it AVAILABLE;
3. smoke ``:predict`` it with the sample request the training app exported;
4. on success make it the serving version: the ``stable`` version label points at it and
   the policy keeps the newest ``keep_versions``; on any failure (load error, timeout,
   predict error or empty answer) write the previous policy back and raise.

Which version serves is the ``stable`` label, so a version that fails never replaces the
serving one. TF Serving itself sends *unversioned* requests to the highest AVAILABLE
version: between steps 2 and 3 those see the candidate, and after a rollback TF Serving
unloads it again. Clients that must never see an unvalidated version use the label
endpoint (``.../v1/models/NAME/labels/stable``), which is what the publish step returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.protocol.model_config import STABLE_LABEL, ModelConfig, ModelServerConfig
from airflow_tfk.serving.base import Emit, PredictError, ServingError, ServingTarget

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PublishResult:
    model_name: str
    version: int
    previous_version: int | None
    endpoint: str
    kept_versions: tuple[int, ...]
    backend: str
    predictions: Any = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The XCom: model name, version, endpoint, and what the policy now holds."""
        return {
            "model_name": self.model_name,
            "version": self.version,
            "previous_version": self.previous_version,
            "endpoint": self.endpoint,
            "predict_url": f"{self.endpoint}:predict",
            "kept_versions": list(self.kept_versions),
            "backend": self.backend,
        }


def serving_version(model: ModelConfig | None) -> int | None:
    """The version that serves: the ``stable`` label, else the policy's highest version."""
    if model is None:
        return None
    if model.stable is not None:
        return model.stable
    return max(model.versions) if model.versions else None


def kept_versions(model: ModelConfig, new: int, keep: int) -> tuple[int, ...]:
    """The new version, then the previous serving one, then the rest newest first."""
    order = [new]
    previous = serving_version(model)
    if previous is not None and previous != new:
        order.append(previous)
    order += [v for v in sorted(model.versions, reverse=True) if v not in order]
    return tuple(sorted(order[:keep]))


def _check_answer(answer: Any, request: dict[str, Any]) -> Any:
    if not isinstance(answer, dict):
        raise PredictError(f"the answer is not a JSON object: {answer!r:.200}")
    out = answer.get("predictions", answer.get("outputs"))
    if out in (None, [], {}):
        raise PredictError(f"the answer holds no predictions: {answer!r:.200}")
    rows = request.get("instances")
    if isinstance(rows, list) and isinstance(out, list) and len(out) != len(rows):
        raise PredictError(f"{len(rows)} instances sent, {len(out)} predictions received")
    return out


def wait_available(
    target: ServingTarget,
    version: int,
    timeout: float,
    emit: Emit,
    poll: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Return when the server reports ``version`` AVAILABLE; raise on END or timeout."""
    deadline = clock() + timeout
    last = None
    while True:
        state = target.version_state(version)
        if state is not None and state != last:
            emit(
                f"{target.spec.model_name} version {version}: {state.state}"
                + (f" ({state.error_code}: {state.error_message})" if state.failed else "")
            )
            last = state
        if state is not None and state.state == "AVAILABLE":
            return
        if state is not None and state.failed:
            raise ServingError(
                f"version {version} of {target.spec.model_name} failed to load: "
                f"{state.error_code}: {state.error_message}"
            )
        if clock() >= deadline:
            seen = f"last state {last.state}" if last else "the server never reported it"
            raise ServingError(
                f"version {version} of {target.spec.model_name} did not become "
                f"AVAILABLE within {timeout:.0f} s ({seen})"
            )
        sleep(min(poll, max(0.0, deadline - clock())))


def publish(
    target: ServingTarget,
    version: int | None = None,
    sample_request: dict[str, Any] | None = None,
    emit: Emit = log.info,
    poll: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> PublishResult:
    """Publish ``version`` (default: the newest exported) of ``target``'s model.

    :raises ServingError: the version did not load or answer; the previous serving
        version (if any) is serving again.
    """
    spec = target.spec
    name = spec.model_name
    if version is None:
        exported = target.exported_versions()
        if not exported:
            raise ServingError(
                f"no exported version of {name} in the model store ({target.model_base_path()})"
            )
        version = exported[-1]
    target.ensure(emit)
    config = target.read_config() or ModelServerConfig()
    before = config.get(name)
    previous = serving_version(before)
    base = target.model_base_path()
    current = before or ModelConfig(name, base)
    if current.base_path != base:
        current = ModelConfig(name, base, current.platform, current.versions, current.labels)
    if previous == version and target.label_version(STABLE_LABEL) == version:
        state = target.version_state(version)
        if state is not None and state.state == "AVAILABLE":
            emit(f"{name} version {version} is already the serving version")
            return PublishResult(
                name, version, previous, target.endpoint(STABLE_LABEL), current.versions, target.kind
            )
    body = sample_request if sample_request is not None else target.sample_request(version)
    if not isinstance(body, dict) or not body:
        raise ServingError(
            f"no sample request for {name} version {version}: the training app "
            "exports assets.extra/tfk_sample_request.json when it defines "
            "sample_input(); or pass sample_request"
        )
    emit(
        f"publishing {name} version {version} on the {target.kind} backend "
        f"(serving now: {previous if previous is not None else 'none'})"
    )
    candidate = current.with_versions((*current.versions, version))
    target.write_config(config.put(candidate))
    try:
        wait_available(target, version, spec.load_timeout_seconds, emit, poll, sleep, clock)
        answer = target.predict(body, version=version, timeout=spec.predict_timeout_seconds)
        predictions = _check_answer(answer, body)
    except (ServingError, OSError) as exc:
        _rollback(target, config, before, version, previous, emit)
        raise ServingError(
            f"{name} version {version} was not published: {exc}; "
            + (
                f"version {previous} is still serving"
                if previous is not None
                else "no version was serving before"
            )
        ) from exc
    except BaseException:
        _rollback(target, config, before, version, previous, emit)
        raise
    emit(f"smoke predict of version {version} answered: {str(predictions)[:200]}")
    keep = kept_versions(candidate, version, spec.keep_versions)
    final = candidate.with_versions(keep, {**candidate.labels, STABLE_LABEL: version})
    target.write_config(config.put(final))
    _wait_label(target, version, spec.load_timeout_seconds, emit, poll, sleep, clock)
    emit(
        f"{name} version {version} is serving (policy keeps {list(keep)}); endpoint "
        f"{target.endpoint(STABLE_LABEL)}"
    )
    return PublishResult(
        name, version, previous, target.endpoint(STABLE_LABEL), keep, target.kind, predictions
    )


def _rollback(
    target: ServingTarget,
    config: ModelServerConfig,
    before: ModelConfig | None,
    version: int,
    previous: int | None,
    emit: Emit,
) -> None:
    # Without an earlier entry the model leaves the config altogether: an entry with no
    # versions would fall back to TF Serving's default policy, i.e. the broken version.
    restored = (
        config.put(before)
        if before is not None
        else ModelServerConfig(tuple(m for m in config.models if m.name != target.spec.model_name))
    )
    try:
        target.write_config(restored)
        emit(
            f"rolled the version policy of {target.spec.model_name} back "
            f"(version {version} removed; serving: "
            f"{previous if previous is not None else 'none'})"
        )
    except Exception as exc:  # the original failure is what the user must see
        emit(f"could not roll back the version policy of {target.spec.model_name}: {exc}")


def _wait_label(
    target: ServingTarget,
    version: int,
    timeout: float,
    emit: Emit,
    poll: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> None:
    deadline = clock() + timeout
    while target.label_version(STABLE_LABEL) != version:
        if clock() >= deadline:
            emit(
                f"warning: the server has not applied the '{STABLE_LABEL}' label to version "
                f"{version} within {timeout:.0f} s; it will on its next config poll"
            )
            return
        sleep(poll)
