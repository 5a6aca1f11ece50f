"""Which serving pods a publish talks to: every pod that runs, Ready or not. The readiness
probe holds a pod out of the Service until the ``stable`` version answers, so on a first
publish none is Ready, and a replica that starts during a publish must load the new
version before the publish counts it; a pod going away is no longer asked."""

from __future__ import annotations

from typing import Any

from airflow_tfk.serving.kubernetes import KubernetesServing
from airflow_tfk.serving.spec import ServingSpec
from tests.serving.test_pods import _gone, pod


class _Listed(KubernetesServing):
    """The target with its pod list given; nothing else reaches an API server."""

    listed: list[dict[str, Any]] = []
    asked: list[str] = []

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.asked.append(selector)
        return self.listed


def _target(pods: list[dict[str, Any]]) -> _Listed:
    target = _Listed(ServingSpec(model_name="m", claim="models"), conn_id="unused")
    target.listed, target.asked = pods, []
    return target


def test_every_running_pod_is_a_replica_ready_or_not() -> None:
    target = _target(
        [
            pod("tfs-m-b", running=True, ready=True),
            pod("tfs-m-a", running=True),  # its model is loading: not Ready, still asked
            pod("tfs-m-c", phase="Pending", waiting="ContainerCreating"),
            _gone(pod("tfs-m-d", running=True, ready=True)),
        ]
    )
    views = target.replicas()
    assert list(views) == ["tfs-m-a", "tfs-m-b"]
    assert [v._pod for v in views.values()] == ["tfs-m-a", "tfs-m-b"]  # type: ignore[attr-defined]
    assert target.asked == ["tfk.airflow.apache.org/serving=tfs-m,app.kubernetes.io/component=serving"]


def test_with_no_pod_running_the_service_answers_why() -> None:
    target = _target([pod("tfs-m-a", phase="Pending", waiting="ContainerCreating")])
    views = target.replicas()
    assert list(views) == ["Service tfs-m"] and views["Service tfs-m"] is target


def test_the_replicas_still_out_of_the_service_are_the_running_ones_not_ready() -> None:
    target = _target(
        [
            pod("tfs-m-b", running=True, ready=True),
            pod("tfs-m-a", running=True),
            pod("tfs-m-c", phase="Pending", waiting="ContainerCreating"),
            _gone(pod("tfs-m-d", running=True)),
        ]
    )
    assert target.not_ready() == ["tfs-m-a"]
