"""A publish on several replicas that each apply the model config at their own time (as
the kubelet refreshes each pod's ConfigMap copy on its own clock): the stable label moves
only once every replica has the version AVAILABLE, the candidate is smoke-tested on each,
and one replica that cannot load it, or never gets it, rolls the publish back."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_tfk.core.deadline import Clock
from airflow_tfk.protocol.model_config import STABLE_LABEL, ModelServerConfig
from airflow_tfk.serving.base import PredictError, ServingError, VersionState
from airflow_tfk.serving.publish import candidate_name, publish
from airflow_tfk.serving.spec import ServingSpec
from tests.serving.fakes import FakeServing
from tests.serving.test_publish import FakeTime

NEVER = 10**9
CANDIDATE = candidate_name("digits")


class Replica:
    """One server: applies each config the deployment writes ``lag`` polls later."""

    def __init__(self, name: str, lag: int, broken: set[tuple[str, int]]) -> None:
        self.name, self.lag, self.broken = name, lag, broken
        self.config = ModelServerConfig()
        self.queue: list[tuple[int, ModelServerConfig]] = []
        self.predicted: list[tuple[str | None, int | None]] = []

    def tick(self) -> None:
        due = [c for c in self.queue if c[0] <= 0]
        if due:
            self.config = due[-1][1]
        self.queue = [(n - 1, c) for n, c in self.queue if n > 0]

    def version_state(self, version: int, *, model: str | None = None) -> VersionState | None:
        entry = self.config.get(model or "digits")
        if entry is None or version not in entry.versions:
            return None
        if (model or "digits", version) in self.broken:
            return VersionState(version, "END", "RESOURCE_EXHAUSTED", "out of memory")
        return VersionState(version, "AVAILABLE")

    def label_version(self, label: str) -> int | None:
        entry = self.config.get("digits")
        return entry.labels.get(label) if entry else None

    def predict(
        self, body: dict[str, Any], *, version=None, label=None, timeout=30.0, model=None, protocol="rest"
    ):
        self.predicted.append((model, version))
        if self.version_state(version, model=model) is None:
            raise PredictError("predict answered HTTP 404: not found")
        return {"predictions": [[float(version)]] * len(body["instances"])}

    def unreachable(self) -> str | None:
        return None


class Deployment(FakeServing):
    """The model config written once, applied by each replica on its own."""

    def __init__(self, spec: ServingSpec, replicas: dict[str, Replica]) -> None:
        super().__init__(spec, {1: "ok", 2: "ok"})
        self.pods = replicas
        self.label_moves: list[dict[str, tuple[int, ...]]] = []  # what each replica had then

    def write_config(self, config: ModelServerConfig) -> None:
        entry = config.get("digits")
        if entry is not None and entry.labels.get(STABLE_LABEL) == 2:
            self.label_moves.append(
                {
                    n: (r.config.get("digits").versions if r.config.get("digits") else ())
                    for n, r in self.pods.items()
                }
            )
        super().write_config(config)
        for r in self.pods.values():
            r.queue.append((r.lag, config))

    def replicas(self):
        for r in self.pods.values():
            r.tick()
        return dict(self.pods)


def deployment(lags: dict[str, int], broken: dict[str, set[tuple[str, int]]] | None = None) -> Deployment:
    spec = ServingSpec(model_name="digits", claim="models", replicas=len(lags), load_timeout_seconds=30)
    pods = {n: Replica(n, lag, (broken or {}).get(n, set())) for n, lag in lags.items()}
    return Deployment(spec, pods)


def run(target: Deployment, version: int, lines: list[str]):
    time = FakeTime()
    return publish(target, version, emit=lines.append, poll=1.0, clock=Clock(time, time.sleep))


def test_the_label_moves_only_once_every_replica_has_the_version():
    target = deployment({"pod-a": 0, "pod-b": 6})
    run(target, 1, [])
    lines: list[str] = []
    result = run(target, 2, lines)
    assert (result.version, result.previous_version) == (2, 1)
    (moment,) = target.label_moves
    assert moment == {"pod-a": (1, 2), "pod-b": (1, 2)}, moment
    for pod in target.pods.values():  # the candidate answered its smoke test on each
        assert (candidate_name("digits"), 2) in pod.predicted
        assert pod.label_version(STABLE_LABEL) is None or pod.label_version(STABLE_LABEL) == 2
    assert any("AVAILABLE on pod-b" in line for line in lines), lines
    assert any("AVAILABLE on every replica (2)" in line for line in lines), lines


@pytest.mark.parametrize(
    "lags,broken,words",
    [
        # the candidate loads everywhere, the model's own entry not on pod-b
        ({"pod-a": 0, "pod-b": 0}, {"pod-b": {("digits", 2)}}, "failed to load on pod-b: RESOURCE_EXHAUSTED"),
        ({"pod-a": 0, "pod-b": 0}, {"pod-b": {(CANDIDATE, 2)}}, "failed to load on pod-b"),
        ({"pod-a": 0, "pod-b": NEVER}, {}, "pod-b: the server never reported it"),
    ],
)
def test_one_replica_without_the_version_rolls_back(lags, broken, words):
    target = deployment(lags, broken)
    target.pods["pod-b"].lag = 0
    run(target, 1, [])
    target.pods["pod-b"].lag = lags["pod-b"]
    with pytest.raises(ServingError) as err:
        run(target, 2, [])
    assert words in str(err.value), err.value
    assert "version 1 is still serving" in str(err.value)
    entry = target.config.get("digits")
    assert entry.versions == (1,) and entry.stable == 1
    assert target.config.get(candidate_name("digits")) is None
    assert not target.label_moves


class _Probed(Deployment):
    """Replicas that turn Ready a few polls after the label resolves on them."""

    def __init__(self, spec: ServingSpec, replicas: dict[str, Replica], polls: int) -> None:
        super().__init__(spec, replicas)
        self.polls, self.asked = polls, 0

    def not_ready(self) -> list[str]:
        self.asked += 1
        if any(r.label_version(STABLE_LABEL) is None for r in self.pods.values()):
            return sorted(self.pods)
        self.polls -= 1
        return sorted(self.pods) if self.polls >= 0 else []


def _probed(polls: int) -> _Probed:
    spec = ServingSpec(model_name="digits", claim="models", replicas=2, load_timeout_seconds=30)
    return _Probed(spec, {n: Replica(n, 0, set()) for n in ("pod-a", "pod-b")}, polls)


def test_a_publish_returns_once_the_replicas_with_the_label_are_ready():
    target = _probed(3)
    lines: list[str] = []
    run(target, 1, lines)
    assert target.polls == -1 and target.asked >= 4
    assert not any("did not turn Ready" in line for line in lines), lines


def test_replicas_that_never_turn_ready_are_a_warning_not_a_failure():
    target = _probed(10_000)
    lines: list[str] = []
    result = run(target, 1, lines)
    assert result.version == 1
    assert any(line.startswith("warning: pod-a, pod-b serve(s) the version but did not") for line in lines)
