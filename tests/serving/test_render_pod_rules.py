"""Serving and TensorBoard pods follow the cluster's rules as the training's pods do: the
tolerations, priority class and ServiceAccount of their spec reach every pod they make
(TF Serving's Deployment, the store reader's Job, TensorBoard's Deployment), valid against
the Kubernetes schema; a bad value is refused naming its field."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.render import render_sample_reader, render_serving
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.tensorboard.render import render_tensorboard
from tests.serving.test_render import K8S_VERSIONS, validate

RULES = {
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute", "toleration_seconds": 60},
    ],
    "priority_class": "ml-serving",
    "service_account": "model-reader",
    "node_selector": {"pool": "ml"},
    "image_pull_secrets": ["regcred"],
}
K8S_TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
    {"key": "spot", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
]


def _pod_specs() -> list[tuple[str, dict]]:
    serving = ServingSpec.from_dict({"model_name": "digits", "claim": "models", **RULES})
    tensorboard = TensorBoardSpec.from_dict({"name": "tb", "claim": "logs", **RULES})
    objects = [
        *render_serving(serving),
        render_sample_reader(serving, "reader", 1),
        *render_tensorboard(tensorboard),
    ]
    out = []
    for m in objects:
        if m["kind"] in ("Deployment", "Job"):
            for version in K8S_VERSIONS:
                validate(m, version)
            out.append((f"{m['kind']} {m['metadata']['name']}", m["spec"]["template"]["spec"]))
    return out


def test_every_serving_and_tensorboard_pod_carries_the_rules():
    pods = _pod_specs()
    assert len(pods) == 3, [name for name, _ in pods]
    for name, pod in pods:
        assert pod["tolerations"] == K8S_TOLERATIONS, name
        assert pod["priorityClassName"] == "ml-serving", name
        assert pod["serviceAccountName"] == "model-reader", name
        assert pod["automountServiceAccountToken"] is False, name  # a named account, still no token
        assert pod["nodeSelector"] == {"pool": "ml"} and pod["imagePullSecrets"] == [{"name": "regcred"}], (
            name
        )


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"tolerations": {"key": "a"}}, "tolerations"),
        ({"tolerations": ["a"]}, "tolerations[0]"),
        ({"tolerations": [{"operator": "Equal"}]}, "tolerations[0].operator"),
        ({"tolerations": [{"key": "a", "effect": "Never"}]}, "tolerations[0].effect"),
        ({"tolerations": [{"key": "a", "colour": "x"}]}, "tolerations[0].colour"),
        ({"priority_class": "Not A Name"}, "priority_class"),
        ({"service_account": "a/b"}, "service_account"),
    ],
)
@pytest.mark.parametrize("kind", ["serving", "tensorboard"])
def test_a_bad_rule_is_refused_naming_its_field(kind, extra, field):
    with pytest.raises(SpecError) as err:
        if kind == "serving":
            ServingSpec.from_dict({"model_name": "digits", "claim": "models", **extra})
        else:
            TensorBoardSpec.from_dict({"name": "tb", "claim": "logs", **extra})
    assert err.value.field == field, err.value
