"""TensorBoard on Kubernetes succeeds only when its pod is Ready, and fails at once,
naming the pod and the reason, when the pod cannot become Ready (a stand-in API answers
the pod lists; the real API server is in tests/k8s_integration/test_serving_pods.py)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_tfk.serving.spec import TensorBoardSpec
from airflow_tfk.tensorboard.kubernetes import KubernetesTensorBoard, TensorBoardFailed
from tests.serving.test_pods import pod


class _Api:
    """Each pod list answers the next of ``answers`` (the last one again at the end)."""

    def __init__(self, answers: list[list[dict[str, Any]]]) -> None:
        self.answers = answers
        self.lists = 0

    def request(self, method: str, path: str, query: dict[str, Any]) -> tuple[int, Any]:
        assert method == "GET" and path == "/api/v1/namespaces/default/pods", path
        assert (
            query["labelSelector"]
            == "tfk.airflow.apache.org/tensorboard=tb,app.kubernetes.io/component=tensorboard"
        )
        items = self.answers[min(self.lists, len(self.answers) - 1)]
        self.lists += 1
        return 200, {"items": items}

    def text(self, path: str, query: dict[str, Any]) -> str:
        return "tensorboard: error: no such flag --bad\n"


def board(
    monkeypatch: pytest.MonkeyPatch, answers: list[list[dict[str, Any]]], **kw: Any
) -> KubernetesTensorBoard:
    tb = KubernetesTensorBoard(TensorBoardSpec(name="tb", claim="logs"), poll_seconds=0.0, **kw)
    api = _Api(answers)
    monkeypatch.setattr(KubernetesTensorBoard, "api", property(lambda self: api))
    return tb


def test_waits_until_the_pod_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    tb = board(
        monkeypatch,
        [
            [],
            [pod("tb-1", phase="Pending", waiting="ContainerCreating")],
            [pod("tb-1", ready=True, running=True)],
        ],
    )
    tb.wait_ready(seen.append)
    assert any("ContainerCreating" in s for s in seen), seen


@pytest.mark.parametrize(
    ("stuck", "reason"),
    [
        (pod("tb-1", phase="Pending", waiting="ErrImageNeverPull"), "ErrImageNeverPull"),
        (pod("tb-1", waiting="CrashLoopBackOff", last=("Error", 2), restarts=1), "CrashLoopBackOff"),
    ],
)
def test_fails_at_once_naming_pod_reason_and_log(
    monkeypatch: pytest.MonkeyPatch, stuck: dict, reason: str
) -> None:
    tb = board(monkeypatch, [[pod("tb-1", phase="Pending")], [stuck]])
    with pytest.raises(TensorBoardFailed) as err:
        tb.wait_ready(lambda _: None)
    assert f"pod tb-1: {reason}" in str(err.value), err.value
    if reason == "CrashLoopBackOff":
        assert "no such flag --bad" in str(err.value)


def test_times_out_naming_what_it_last_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    tb = board(
        monkeypatch, [[pod("tb-1", phase="Pending", waiting="ContainerCreating")]], start_timeout_seconds=0.0
    )
    with pytest.raises(TensorBoardFailed, match="not Ready within 0 s .*ContainerCreating"):
        tb.wait_ready(lambda _: None)
