"""Least privilege: the provider runs as the ServiceAccount of deploy/rbac/ (bound token,
through a kubeconfig in an Airflow ``kubernetes`` connection), and that is enough for the
whole lifecycle - create, blocking and deferred watch, logs, PS clean-up,
previous_run_policy (find, delete with a reason Event), failure teardown - without a
single 403; the same identity is denied in any other namespace.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred
from k8s import harness
from kubernetes import client
from kubernetes.utils import create_from_dict

from airflow_tfk.backends.kubernetes.backend import KubernetesApiError
from airflow_tfk.core import naming
from k8s_integration import _tfk
from tests.helpers import rbac_render

rbac = rbac_render()  # deploy/rbac/render.py

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures


def _apply(api, docs: list[dict], namespace: str) -> None:
    for d in docs:
        create_from_dict(api, d, namespace=d["metadata"].get("namespace", namespace))


def _identity(k8s_cluster, ns: str, tmp_path: Path, conn_id: str) -> str:
    token = k8s_cluster.service_account_token(ns, rbac.SERVICE_ACCOUNT)
    path = k8s_cluster.kubeconfig_for_token(
        tmp_path / f"{conn_id}.kubeconfig", token, rbac.SERVICE_ACCOUNT, ns
    )
    return str(path)


def _no_forbidden(out: str) -> None:
    assert "HTTP 403" not in out and "Forbidden" not in out and "forbidden" not in out, [
        line for line in out.splitlines() if "403" in line or "orbidden" in line
    ][:5]


def test_namespaced_role_is_enough_and_denied_elsewhere(
    k8s_cluster, k8s_api, tfk_ns, tmp_path, capfd, caplog
) -> None:
    _apply(k8s_api, rbac.manifests(tfk_ns), tfk_ns)
    kubeconfig = _identity(k8s_cluster, tfk_ns, tmp_path, "tfk_rbac")
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1)
    with _tfk.use_connection(kubeconfig, "tfk_rbac"):
        # Run A waits deferred (the async hook, as the triggerer would).
        ctx_a = _tfk.task_context("scheduled__a")
        name_a = _tfk.cluster_name(ctx_a)
        op_a = _tfk.make_op(tfk_ns, spec, kubernetes_conn_id="tfk_rbac", deferrable=True)
        with pytest.raises(TaskDeferred) as deferred:
            op_a.execute(ctx_a)
        _tfk.wait_for("run A running", lambda: len(_tfk.pods(k8s_api, tfk_ns, name_a)) == 3)

        # Run B kills A (find + delete with a reason Event), trains, cleans up the PS.
        ctx_b = _tfk.task_context("scheduled__b")
        name_b = _tfk.cluster_name(ctx_b)
        op_b = _tfk.make_op(tfk_ns, spec, kubernetes_conn_id="tfk_rbac", previous_run_policy="kill_previous")
        with _tfk.PodDriver(k8s_api, tfk_ns, name_b):
            assert op_b.execute(ctx_b)["outcome"] == "succeeded"
        out = capfd.readouterr().out
        assert f"killing cluster {name_a}" in out and f"deleted ps of cluster {name_b}" in out

        # A's trigger sees its cluster gone, and why (the Event, read as this identity).
        async def first():
            async for event in deferred.value.trigger.run():
                return event.payload

        event = asyncio.run(first())
        assert event["status"] == "failed" and "killed by the newer run scheduled__b" in event["message"], (
            event
        )
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, name_a)

        # A failure: logs of the failed task, then everything deleted.
        ctx_c = _tfk.task_context("manual__c")
        name_c = _tfk.cluster_name(ctx_c)
        op_c = _tfk.make_op(tfk_ns, {**spec, "permanent_exit_codes": [3]}, kubernetes_conn_id="tfk_rbac")

        def fail(pod):
            role = pod.metadata.labels.get(naming.LABEL_ROLE)
            return {harness.EXIT_CODE: "3"} if role == "worker" and _tfk.index_of(pod) == 0 else None

        with _tfk.PodDriver(k8s_api, tfk_ns, name_c, rule=fail), pytest.raises(Exception) as err:
            op_c.execute(ctx_c)
        assert "task worker-0 failed (ExitCode" in str(err.value), err.value
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, name_c)
        _no_forbidden(capfd.readouterr().out + caplog.text)  # the task log and the backend's

        # The Role lets it read its own namespace (the per-training check), no other.
        sa = k8s_cluster.api_client(token=k8s_cluster.service_account_token(tfk_ns, rbac.SERVICE_ACCOUNT))
        assert client.CoreV1Api(sa).read_namespace(tfk_ns).metadata.name == tfk_ns
        with pytest.raises(client.ApiException) as other_ns:
            client.CoreV1Api(sa).read_namespace("default")
        assert other_ns.value.status == 403

        # The same identity anywhere else: denied, nothing created.
        other = f"t-other-{uuid.uuid4().hex[:6]}"
        client.CoreV1Api(k8s_api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=other))
        )
        try:
            ctx_d = _tfk.task_context("manual__elsewhere")
            op_d = _tfk.make_op(other, _tfk.spec(other), kubernetes_conn_id="tfk_rbac")
            with pytest.raises(KubernetesApiError) as denied:
                op_d.execute(ctx_d)
            assert denied.value.status == 403, denied.value
            assert f"system:serviceaccount:{tfk_ns}:{rbac.SERVICE_ACCOUNT}" in denied.value.message
            assert _tfk.leftovers(k8s_api, other, _tfk.cluster_name(ctx_d)) == []
            # ... and a per-training namespace needs the ClusterRole, which it lacks.
            op_e = _tfk.make_op(
                tfk_ns, {**spec, "namespace_per_training": True}, kubernetes_conn_id="tfk_rbac"
            )
            ctx_e = _tfk.task_context("manual__ownns")
            with pytest.raises(KubernetesApiError) as no_ns:
                op_e.execute(ctx_e)
            own_ns = f"{tfk_ns}-{_tfk.cluster_name(ctx_e)}"
            assert no_ns.value.status == 403 and own_ns in no_ns.value.message, no_ns.value
            assert _tfk.leftovers(k8s_api, own_ns, _tfk.cluster_name(ctx_e)) == []
        finally:
            client.CoreV1Api(k8s_api).delete_namespace(other)


def _delete_cluster_scoped(k8s_api, docs: list[dict]) -> None:
    rbac_api = client.RbacAuthorizationV1Api(k8s_api)
    admission = client.AdmissionregistrationV1Api(k8s_api)
    delete = {
        "ClusterRoleBinding": rbac_api.delete_cluster_role_binding,
        "ClusterRole": rbac_api.delete_cluster_role,
        "ValidatingAdmissionPolicyBinding": admission.delete_validating_admission_policy_binding,
        "ValidatingAdmissionPolicy": admission.delete_validating_admission_policy,
    }
    for d in docs:
        if d["kind"] in delete:
            try:
                delete[d["kind"]](d["metadata"]["name"])
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


def _allowed(api, user: str, resource: str, verb: str, namespace: str | None, name: str | None) -> bool:
    """The API server's authorizer, asked whether ``user`` may ``verb`` the resource."""
    attributes: dict = {"verb": verb, "resource": resource, "namespace": namespace or "", "name": name or ""}
    groups = [
        "system:serviceaccounts",
        f"system:serviceaccounts:{user.split(':')[2]}",
        "system:authenticated",
    ]
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        {"spec": {"user": user, "groups": groups, "resourceAttributes": attributes}}
    )
    return bool(review.status.allowed)


def _denied(call, *args, **kw) -> str:
    """The 403 message of a write as the ServiceAccount (dry run: nothing is changed even
    if it were allowed)."""
    with pytest.raises(client.ApiException) as err:
        call(*args, dry_run="All", **kw)
    assert err.value.status == 403, (err.value.status, err.value.body)
    return str(err.value.body)


def _job(name: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}
            }
        },
    }


def _wait_enforced(core, namespace: str, what: str) -> None:
    """Admission policies take effect a moment after they are created."""

    def enforced() -> bool:
        try:
            core.delete_namespace(namespace, dry_run="All")
        except client.ApiException as exc:
            return exc.status == 403 and what in str(exc.body)
        return False

    _tfk.wait_for("the admission policies enforced", enforced, timeout=60)


def test_namespace_per_training_identity_is_confined_to_its_own_namespaces(
    k8s_cluster, k8s_api, tfk_ns, tmp_path, capfd, caplog
) -> None:
    """The ClusterRole grants namespace delete and Job create cluster-wide; the admission
    policies of the same file confine them. As the bound ServiceAccount: the whole
    lifecycle in a namespace the provider made, without a 403; 403 for every write in
    kube-system and in a namespace of another owner; and it cannot make a namespace its own."""
    suffix = f"-{uuid.uuid4().hex[:6]}"
    docs = rbac.manifests(tfk_ns, namespace_per_training=True, name_suffix=suffix, pull_secrets=["regcred"])
    assert {d["kind"] for d in docs} >= {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    admin = client.CoreV1Api(k8s_api)
    other = f"t-owner-{uuid.uuid4().hex[:6]}"  # someone else's namespace, with a workload
    shared = f"t-shared-{uuid.uuid4().hex[:6]}"  # an admin's, labelled for the provider
    try:
        _apply(k8s_api, docs, tfk_ns)
        admin.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
        admin.create_namespace(
            client.V1Namespace(
                metadata=client.V1ObjectMeta(
                    name=shared, labels={"app.kubernetes.io/managed-by": naming.MANAGED_BY}
                )
            )
        )
        for ns in ("kube-system", other):
            admin.create_namespaced_config_map(
                ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="kept"), data={"a": "b"})
            )
        # the pull secret trainings name, and secrets it must not read: another owner's, and
        # one beside the pull secret in the source namespace
        pull = {".dockerconfigjson": base64.b64encode(b'{"auths":{}}').decode()}
        admin.create_namespaced_secret(
            tfk_ns,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="regcred"), type="kubernetes.io/dockerconfigjson", data=pull
            ),
        )
        for ns in (other, tfk_ns):
            admin.create_namespaced_secret(
                ns, client.V1Secret(metadata=client.V1ObjectMeta(name="db-password"), string_data={"p": "x"})
            )
        admin.create_namespaced_service(
            other,
            client.V1Service(
                metadata=client.V1ObjectMeta(name="web"),
                spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)], selector={"a": "b"}),
            ),
        )
        sa = k8s_cluster.api_client(token=k8s_cluster.service_account_token(tfk_ns, rbac.SERVICE_ACCOUNT))
        core, batch = client.CoreV1Api(sa), client.BatchV1Api(sa)
        _wait_enforced(core, other, "may change or delete only the namespaces it created")

        # No Secret anywhere but the pull secret it copies, by name (the API server's own
        # authorizer, asked for the ServiceAccount, and a real read as it)
        user = f"system:serviceaccount:{tfk_ns}:{rbac.SERVICE_ACCOUNT}"
        reads = [
            (verb, ns, name)
            for verb in ("get", "list", "watch")
            for ns, name in (
                (other, "db-password"),
                ("kube-system", None),
                (tfk_ns, "db-password"),
                (None, None),
            )
        ]
        assert [r for r in reads if _allowed(k8s_api, user, "secrets", *r)] == []
        assert _allowed(k8s_api, user, "secrets", "get", tfk_ns, "regcred")
        for ns in (other, tfk_ns):
            with pytest.raises(client.ApiException) as read:
                core.read_namespaced_secret("db-password", ns)
            assert read.value.status == 403, read.value
        assert core.read_namespaced_secret("regcred", tfk_ns).type == "kubernetes.io/dockerconfigjson"

        # kube-system and another owner's namespace: every write refused by the API server
        # (the API server itself never deletes kube-system: its NamespaceLifecycle says so first)
        assert "may not be deleted" in _denied(core.delete_namespace, "kube-system")
        assert "only the namespaces it created" in _denied(core.delete_namespace, other)
        for ns in ("kube-system", other):
            assert "may write only in namespaces labelled" in _denied(
                batch.create_namespaced_job, ns, _job("x")
            )
            assert "may write only" in _denied(
                core.create_namespaced_config_map,
                ns,
                client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x")),
            )
            assert "may write only" in _denied(core.delete_namespaced_config_map, "kept", ns)
            # ... nor can it claim the namespace by labelling it
            assert "only the namespaces it created" in _denied(
                core.patch_namespace,
                ns,
                {
                    "metadata": {
                        "labels": {"app.kubernetes.io/managed-by": "airflow-tfk", naming.LABEL_CLUSTER: "x"}
                    }
                },
            )
        # the service proxy (a `:predict` is a POST through it) is a write too
        with pytest.raises(client.ApiException) as proxied:
            core.connect_post_namespaced_service_proxy_with_path("web:80", other, "v1/models/m:predict")
        assert proxied.value.status == 403 and "may write only" in str(proxied.value.body), proxied.value
        # a namespace it would create must carry the provider's labels, and no weak Pod Security
        unlabelled = client.V1Namespace(metadata=client.V1ObjectMeta(name=f"{tfk_ns}-bare"))
        assert "may create only namespaces labelled" in _denied(core.create_namespace, unlabelled)
        labels = {"app.kubernetes.io/managed-by": naming.MANAGED_BY, naming.LABEL_CLUSTER: "c"}
        privileged = client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=f"{tfk_ns}-priv", labels={**labels, "pod-security.kubernetes.io/enforce": "privileged"}
            )
        )
        assert "weaker than baseline" in _denied(core.create_namespace, privileged)
        # the admin's labelled namespace: it may write there, not delete it
        core.create_namespaced_config_map(shared, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="ok")))
        assert "only the namespaces it created" in _denied(core.delete_namespace, shared)
        for ns in ("kube-system", other, shared):
            assert admin.read_namespace(ns).status.phase == "Active"
        assert admin.read_namespaced_config_map("kept", "kube-system").data == {"a": "b"}

        # the whole lifecycle in a namespace of its own: no 403
        kubeconfig = _identity(k8s_cluster, tfk_ns, tmp_path, "tfk_rbac_ns")
        with _tfk.use_connection(kubeconfig, "tfk_rbac_ns"):
            ctx = _tfk.task_context("manual__ownns")
            name = _tfk.cluster_name(ctx)
            spec = _tfk.spec(
                tfk_ns,
                "all_reduce",
                workers=2,
                ps=0,
                namespace_per_training=True,
                image_pull_secrets=["regcred"],
            )
            own_ns = f"{tfk_ns}-{name}"
            op = _tfk.make_op(tfk_ns, spec, kubernetes_conn_id="tfk_rbac_ns", cleanup="all")

            seen = []

            def copied(pod):
                # the pods name the copy, and it is there: made in the training's namespace
                # from the pull secret it read by name
                copy = admin.read_namespaced_secret("regcred", own_ns)
                names = [s.name for s in pod.spec.image_pull_secrets or []]
                seen.append((names, copy.type, copy.data == pull))
                return _tfk.default_rule(pod)

            with _tfk.PodDriver(k8s_api, own_ns, name, rule=copied):
                assert op.execute(ctx)["outcome"] == "succeeded"
            assert seen and set(map(str, seen)) == {
                str((["regcred"], "kubernetes.io/dockerconfigjson", True))
            }
            out = capfd.readouterr().out + caplog.text
            assert f"networkpolicies, namespace {own_ns})" in out, out[-2000:]  # deleted with it
            _no_forbidden(out)
            _tfk.wait_no_leftovers(k8s_api, own_ns, name, timeout=90)

            # a pull secret its Role does not list: refused naming the field, nothing made
            ctx = _tfk.task_context("manual__ownns_secret")
            name = _tfk.cluster_name(ctx)
            op = _tfk.make_op(
                tfk_ns, {**spec, "image_pull_secrets": ["db-password"]}, kubernetes_conn_id="tfk_rbac_ns"
            )
            with pytest.raises(KubernetesApiError) as denied:
                op.execute(ctx)
            assert denied.value.status == 403, denied.value
            assert f"image_pull_secrets[0]: read Secret {tfk_ns}/db-password" in str(denied.value), (
                denied.value
            )
            _tfk.wait_no_leftovers(k8s_api, f"{tfk_ns}-{name}", name, timeout=90)
    finally:
        _delete_cluster_scoped(k8s_api, docs)
        for ns in (other, shared):
            try:
                admin.delete_namespace(ns)
            except client.ApiException:
                pass
        try:
            admin.delete_namespaced_config_map("kept", "kube-system")
        except client.ApiException:
            pass
