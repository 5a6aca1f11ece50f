"""What a training's own namespace gets: pull secrets and the ServiceAccount copied from
``namespace``, a LocalQueue made; a missing or unfit source fails naming the field,
before anything is written (the plan only reads). Driven with canned answers; the real
API server and Kueue are in tests/k8s_integration/_kueue_own_namespace.py."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_tfk.backends.kubernetes.namespace import needs_plan
from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.cluster import TFClusterSpec

LABELS = {"tfk.airflow.apache.org/cluster": "t"}


def spec(**extra: Any) -> TFClusterSpec:
    base = {"name": "t", "image": "i", "command": ["x"], "mode": "all_reduce", "worker": {"replicas": 1}}
    return TFClusterSpec.from_dict({**base, "namespace": "team", "namespace_per_training": True, **extra})


def drive(plan: Any, answers: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the plan; ``answers``: path -> body (absent: 404). Returns (result, requests)."""
    asked: list[str] = []
    answer = None
    try:
        while True:
            req = plan.send(answer)
            assert req.method == "GET", req  # it never writes
            asked.append(req.path)
            body = answers.get(req.path)
            answer = None if body is None else (200, body)
    except StopIteration as stop:
        return stop.value, asked


SECRET = "/api/v1/namespaces/team/secrets/regcred"
ACCOUNT = "/api/v1/namespaces/team/serviceaccounts/trainer"
QUEUES = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team/localqueues"


def test_copies_secret_and_account_and_makes_the_queue() -> None:
    answers = {
        SECRET: {
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": "e30="},
            "metadata": {"name": "regcred", "uid": "u1", "resourceVersion": "7"},
        },
        ACCOUNT: {
            "metadata": {"name": "trainer", "annotations": {"iam.gke.io/gcp-service-account": "a@b"}},
            "automountServiceAccountToken": False,
            "secrets": [{"name": "trainer-token"}],
        },
        QUEUES: {"items": []},
        f"{QUEUES}/lq": {"spec": {"clusterQueue": "team-cq"}},
    }
    s = spec(image_pull_secrets=["regcred"], service_account="trainer", queue_name="lq")
    out, _ = drive(needs_plan(s, LABELS), answers)
    secret, account, queue = out
    assert secret["metadata"] == {"name": "regcred", "namespace": "team-t", "labels": LABELS}
    assert secret["type"] == "kubernetes.io/dockerconfigjson" and secret["data"] == {
        ".dockerconfigjson": "e30="
    }
    assert account["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "a@b"}
    assert account["automountServiceAccountToken"] is False and "secrets" not in account
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta2" and queue["spec"] == {"clusterQueue": "team-cq"}
    assert queue["metadata"]["namespace"] == "team-t"


def test_the_named_cluster_queue_needs_no_source_queue() -> None:
    out, asked = drive(needs_plan(spec(queue_name="lq", cluster_queue="cq"), LABELS), {QUEUES: {"items": []}})
    assert out[0]["spec"] == {"clusterQueue": "cq"} and f"{QUEUES}/lq" not in asked


@pytest.mark.parametrize(
    ("extra", "answers", "field"),
    [
        ({"image_pull_secrets": ["regcred"]}, {}, "image_pull_secrets[0]"),
        (
            {"image_pull_secrets": ["regcred"]},
            {SECRET: {"type": "kubernetes.io/service-account-token", "data": {}}},
            "image_pull_secrets[0]",
        ),
        ({"service_account": "trainer"}, {}, "service_account"),
        ({"queue_name": "lq"}, {QUEUES: {"items": []}}, "cluster_queue"),
        ({"queue_name": "lq"}, {}, "queue_name"),  # no Kueue API at all
    ],
)
def test_a_source_that_cannot_be_copied_names_the_field(extra: dict, answers: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        drive(needs_plan(spec(**extra), LABELS), answers)
    assert err.value.field == field, err.value


def test_no_own_namespace_needs_nothing() -> None:
    s = TFClusterSpec.from_dict(
        {"name": "t", "image": "i", "command": ["x"], "mode": "all_reduce", "worker": {"replicas": 1}}
    )
    assert drive(needs_plan(s, LABELS), {}) == ([], [])
