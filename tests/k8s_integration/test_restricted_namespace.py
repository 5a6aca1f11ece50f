"""The namespace a training gets (namespace_per_training) enforces the restricted Pod
Security level, and every pod the provider renders is admitted there: the training pods of
every mode (sidecars and init containers included), TF Serving, its store reader Job and
TensorBoard. Dry-run creates of each pod template, as a controller would create it, in the
rendered Namespace made for real; a privileged pod is refused there, so the label is
enforced, not decoration."""

from __future__ import annotations

import copy
import uuid

import pytest
from kubernetes import client

from airflow_tfk.core.naming import pod_security_labels
from airflow_tfk.render.manifests import render
from airflow_tfk.serving.render import render_sample_reader, render_serving
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.tensorboard.render import render_tensorboard
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

SIDE = {"name": "side", "image": "busybox:1", "command": ["sleep", "1"]}
INIT = {"name": "prepare", "image": "busybox:1", "command": ["true"]}


def _templates(doc: dict) -> list[dict]:
    if doc["kind"] in ("Job", "Deployment"):
        return [doc["spec"]["template"]]
    return []


def _specs(ns: str) -> list[dict]:
    rules = {"pod": {"sidecars": [SIDE], "init_containers": [INIT]}}
    return [
        _tfk.spec(ns, "between_graph", workers=2, ps=1, **rules),
        _tfk.spec(ns, "parameter_server", workers=1, ps=1, evaluator={"replicas": 1}),
        _tfk.spec(ns, "all_reduce", workers=2, ps=0, metrics_port=9100),
    ]


def test_a_per_training_namespace_admits_every_rendered_pod_and_refuses_a_privileged_one(k8s_api) -> None:
    core = client.CoreV1Api(k8s_api)
    source = f"t-src-{uuid.uuid4().hex[:6]}"
    data = {**_specs(source)[0], "name": "restricted", "namespace_per_training": True}
    namespace = render(TFClusterSpec.from_dict(data))[0]
    assert namespace["kind"] == "Namespace"
    assert pod_security_labels().items() <= namespace["metadata"]["labels"].items()
    ns = namespace["metadata"]["name"]
    core.create_namespace(namespace)
    try:
        # the pods' ServiceAccount admission looks the account up: made by its controller
        accounts = lambda: core.list_namespaced_service_account(ns).items  # noqa: E731
        _tfk.wait_for("the default ServiceAccount", accounts, 30)
        templates = []
        for i, d in enumerate(_specs(ns)):
            for m in render(TFClusterSpec.from_dict({"name": f"restricted-{i}", **d})):
                templates += [(f"{m['kind']} {m['metadata']['name']}", t) for t in _templates(m)]
        serving = ServingSpec(model_name="digits", claim="models", namespace=ns)
        for m in [*render_serving(serving), render_sample_reader(serving, "digits-reader", 1)]:
            templates += [(f"{m['kind']} {m['metadata']['name']}", t) for t in _templates(m)]
        tensorboard = TensorBoardSpec(name="tb", claim="logs", namespace=ns)
        for m in render_tensorboard(tensorboard):
            templates += [(f"{m['kind']} {m['metadata']['name']}", t) for t in _templates(m)]
        assert {w.split()[0] for w, _ in templates} == {"Job", "Deployment"} and len(templates) >= 10
        refused = []
        for i, (what, template) in enumerate(templates):
            pod = {"metadata": {**copy.deepcopy(template.get("metadata", {})), "name": f"p-{i}"}}
            pod["spec"] = copy.deepcopy(template["spec"])
            try:
                core.create_namespaced_pod(ns, pod, dry_run="All")
            except client.ApiException as exc:
                refused.append((what, exc.status, str(exc.body)[:400]))
        assert refused == [], refused

        privileged = {
            "metadata": {"name": "root"},
            "spec": {
                "containers": [{"name": "c", "image": "busybox:1", "securityContext": {"privileged": True}}]
            },
        }
        with pytest.raises(client.ApiException) as err:
            core.create_namespaced_pod(ns, privileged, dry_run="All")
        body = str(err.value.body)  # JSON: the quotes of the message are escaped
        assert err.value.status == 403 and "violates PodSecurity" in body and "restricted:latest" in body
    finally:
        core.delete_namespace(ns)


def test_the_operator_refuses_a_pod_the_policy_forbids_before_the_api_server_sees_it(
    k8s_api, tfk_ns, tfk_conn, monkeypatch
) -> None:
    """The operator binds the deployment's policy (``[tfk_policy]``, restricted by default)
    to its backend: a privileged sidecar is refused naming its field, and nothing of the
    cluster exists. Under a policy of ``privileged`` the platform team chose (the API
    server's own namespace allows it: the test namespace enforces nothing), the same
    training's objects are made."""
    from airflow_tfk.core.errors import SpecErrors

    bad = {
        "name": "agent",
        "image": "busybox:1",
        "command": ["sleep", "1"],
        "securityContext": {"privileged": True},
    }
    data = _tfk.spec(tfk_ns, "all_reduce", workers=1, ps=0, pod={"sidecars": [bad]})
    ctx = _tfk.task_context("manual__policy")
    name = _tfk.cluster_name(ctx)
    with pytest.raises(SpecErrors) as err:
        _tfk.make_op(tfk_ns, data).execute(ctx)
    assert "pod.sidecars[0].securityContext.privileged" in [e.field for e in err.value.errors]
    assert _tfk.leftovers(k8s_api, tfk_ns, name) == []

    monkeypatch.setenv("AIRFLOW__TFK_POLICY__POD_SECURITY_LEVEL", "privileged")
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.operators.training import TFTrainingOperator

    op = _tfk.make_op(tfk_ns, data)
    backend = op.make_backend()
    assert isinstance(op, TFTrainingOperator) and isinstance(backend, KubernetesBackend)
    spec = TFClusterSpec.from_dict({**data, "name": name})
    ref = backend.create(spec)
    try:
        assert _tfk.leftovers(k8s_api, tfk_ns, name)
    finally:
        backend.delete(ref, "test over")
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
