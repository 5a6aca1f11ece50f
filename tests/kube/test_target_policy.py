"""TF Serving, its store reader and TensorBoard under the platform policy
(``KubeTarget.checked``, which the operators' targets run before every apply): the pods the
provider renders meet the default policy (restricted), and a stricter one refuses them,
naming each field, before anything reaches a cluster."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecErrors
from airflow_tfk.kube.target import KubeTarget
from airflow_tfk.serving.render import render_sample_reader, render_serving
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.spec.platform_policy import PlatformPolicy
from airflow_tfk.tensorboard.render import render_tensorboard

SPEC = ServingSpec(model_name="digits", claim="models", namespace="ml", replicas=2)


def _all() -> list[list[dict]]:
    return [
        render_serving(SPEC, None, ""),
        [render_sample_reader(SPEC, "digits-read-1", 3, None, 60)],
        render_tensorboard(TensorBoardSpec(name="tb", claim="logs")),
    ]


def test_the_rendered_serving_and_tensorboard_pods_meet_the_default_policy() -> None:
    target = KubeTarget(conn_id="unused")  # no request: the connection is opened on first use
    target.policy = PlatformPolicy()
    for manifests in _all():
        assert target.checked(manifests) is manifests


@pytest.mark.parametrize(
    ("policy", "rule"),
    [
        (PlatformPolicy(allowed_image_prefixes=("registry.nowhere/",)), "platform/images"),
        (PlatformPolicy(max_pod_cpu="1m"), "platform/max-pod-cpu"),
    ],
)
def test_a_stricter_policy_refuses_them_naming_each_field(policy: PlatformPolicy, rule: str) -> None:
    target = KubeTarget(conn_id="unused")
    target.policy = policy
    for manifests in _all():
        with pytest.raises(SpecErrors) as err:
            target.checked(manifests)
        assert all(e.field for e in err.value.errors)
        assert f"[platform policy: {rule}]" in str(err.value), str(err.value)


def test_without_a_policy_nothing_is_checked() -> None:
    target = KubeTarget(conn_id="unused")
    manifests = render_serving(SPEC, None, "")
    assert target.policy is None and target.checked(manifests) is manifests
