"""Smoke test of the integration control plane itself: the real API server, Job and
StatefulSet controllers, garbage collector and scheduler, with KWOK playing the nodes."""

from __future__ import annotations

import pytest
from k8s import harness
from kubernetes import client

from k8s_integration._tfk import wait_for

pytestmark = pytest.mark.k8s

IMAGE = "registry.invalid/tfk/never-pulled:1"  # KWOK never pulls anything


def job_pods(core: client.CoreV1Api, ns: str, job: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={job}").items


def running_with_ip(pods: list[client.V1Pod]) -> bool:
    return all(p.status.phase == "Running" and p.status.pod_ip for p in pods)


def job_condition(batch: client.BatchV1Api, ns: str, name: str, ctype: str):
    job = batch.read_namespaced_job_status(name, ns)
    for c in job.status.conditions or []:
        if c.type == ctype and c.status == "True":
            return job, c
    return None


def container(**kw) -> client.V1Container:
    return client.V1Container(name="main", image=IMAGE, command=["python", "train.py"], **kw)


def pod(name: str, annotations: dict[str, str] | None = None, **spec) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations),
        spec=client.V1PodSpec(restart_policy="Never", containers=[container()], **spec),
    )


def indexed_job(name: str, completions: int, **spec) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            completion_mode="Indexed",
            completions=completions,
            parallelism=completions,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(restart_policy="Never", containers=[container()], subdomain=name),
            ),
            **spec,
        ),
    )


def annotate(core: client.CoreV1Api, ns: str, pod: str, annotations: dict[str, str]) -> None:
    core.patch_namespaced_pod(pod, ns, {"metadata": {"annotations": annotations}})


def test_nodes_and_version(k8s_cluster: harness.ControlPlane, k8s_api) -> None:
    version = client.VersionApi(k8s_api).get_code()
    assert version.git_version.startswith("v1.37."), version.git_version
    nodes = client.CoreV1Api(k8s_api).list_node().items
    assert {n.metadata.name for n in nodes} >= set(k8s_cluster.nodes)
    for n in nodes:
        assert n.metadata.annotations[harness.KWOK_NODE_ANNOTATION] == "fake"
        assert {c.type: c.status for c in n.status.conditions}["Ready"] == "True"


def test_indexed_job_runs_and_completes(k8s_api, k8s_namespace: str, k8s_cluster) -> None:
    core, batch, ns = client.CoreV1Api(k8s_api), client.BatchV1Api(k8s_api), k8s_namespace
    batch.create_namespaced_job(ns, indexed_job("w", 3))

    pods = wait_for(
        "3 Running worker pods",
        lambda: (p := job_pods(core, ns, "w")) and len(p) == 3 and running_with_ip(p) and p,
    )
    assert {p.spec.node_name for p in pods} <= set(k8s_cluster.nodes)
    indexes = sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert indexes == ["0", "1", "2"]
    assert all(p.spec.hostname.startswith("w-") and p.spec.subdomain == "w" for p in pods)

    for p in pods:
        annotate(core, ns, p.metadata.name, {harness.EXIT_CODE: "0"})
    job, cond = wait_for("Job Complete", lambda: job_condition(batch, ns, "w", "Complete"))
    assert job.status.succeeded == 3 and not job.status.failed
    for p in job_pods(core, ns, "w"):
        assert p.status.phase == "Succeeded"
        assert p.status.container_statuses[0].state.terminated.exit_code == 0


def test_job_pod_failure_policy_sees_exit_code(k8s_api, k8s_namespace: str) -> None:
    core, batch, ns = client.CoreV1Api(k8s_api), client.BatchV1Api(k8s_api), k8s_namespace
    policy = client.V1PodFailurePolicy(
        rules=[
            client.V1PodFailurePolicyRule(
                action="FailJob",
                on_exit_codes=client.V1PodFailurePolicyOnExitCodesRequirement(operator="In", values=[3]),
            )
        ]
    )
    batch.create_namespaced_job(ns, indexed_job("f", 2, backoff_limit=6, pod_failure_policy=policy))
    pods = wait_for(
        "2 Running pods", lambda: (p := job_pods(core, ns, "f")) and len(p) == 2 and running_with_ip(p) and p
    )
    victim = next(p for p in pods if p.metadata.labels["batch.kubernetes.io/job-completion-index"] == "1")
    annotate(core, ns, victim.metadata.name, {harness.EXIT_CODE: "3", harness.EXIT_MESSAGE: "bad input"})

    job, cond = wait_for("Job Failed", lambda: job_condition(batch, ns, "f", "Failed"))
    assert cond.reason == "PodFailurePolicy", cond
    assert "exit code 3" in cond.message and victim.metadata.name in cond.message, cond.message
    # The Job controller also terminated the other, still running pod; both count as failed.
    assert job.status.failed == 2 and not job.status.active, job.status
    status = core.read_namespaced_pod_status(victim.metadata.name, ns).status
    term = status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason, term.message) == (3, "Error", "bad input")


def test_oomkilled_pod_and_backoff_limit(k8s_api, k8s_namespace: str) -> None:
    core, batch, ns = client.CoreV1Api(k8s_api), client.BatchV1Api(k8s_api), k8s_namespace
    job = indexed_job("oom", 1, backoff_limit=0)
    job.spec.template.metadata.annotations = {
        harness.EXIT_CODE: "137",
        harness.EXIT_REASON: "OOMKilled",
        harness.EXIT_DELAY: "1s",
    }
    batch.create_namespaced_job(ns, job)
    _, cond = wait_for("Job Failed", lambda: job_condition(batch, ns, "oom", "Failed"))
    assert cond.reason == "BackoffLimitExceeded", cond
    (pod,) = job_pods(core, ns, "oom")
    term = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, term.exit_code, term.reason) == ("Failed", 137, "OOMKilled")


def test_image_pull_backoff_and_unschedulable(k8s_api, k8s_namespace: str) -> None:
    core, ns = client.CoreV1Api(k8s_api), k8s_namespace
    core.create_namespaced_pod(ns, pod("pull", annotations={harness.WAITING_REASON: "ImagePullBackOff"}))
    core.create_namespaced_pod(ns, pod("nowhere", node_selector=harness.UNSCHEDULABLE_NODE_SELECTOR))

    def waiting_reason():
        st = core.read_namespaced_pod_status("pull", ns).status
        cs = st.container_statuses or []
        return cs and cs[0].state.waiting and (st.phase, cs[0].state.waiting.reason)

    assert wait_for("ImagePullBackOff", waiting_reason) == ("Pending", "ImagePullBackOff")

    def unschedulable():
        st = core.read_namespaced_pod_status("nowhere", ns).status
        return next(
            (c for c in st.conditions or [] if c.type == "PodScheduled" and c.status == "False"), None
        )

    cond = wait_for("PodScheduled=False", unschedulable)
    assert cond.reason == "Unschedulable", cond
    assert "node affinity/selector" in cond.message, cond.message


def test_statefulset_headless_service_and_gc(k8s_api, k8s_namespace: str, k8s_cluster) -> None:
    core, apps, ns = client.CoreV1Api(k8s_api), client.AppsV1Api(k8s_api), k8s_namespace
    labels = {"app": "ps"}
    grpc = {"name": "grpc", "port": 2222}
    core.create_namespaced_service(
        ns,
        {
            "metadata": {"name": "ps"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": labels,
                "ports": [grpc],
            },
        },
    )
    main = container(ports=[client.V1ContainerPort(container_port=2222, name="grpc")])
    template = client.V1PodTemplateSpec(
        metadata=client.V1ObjectMeta(labels=labels), spec=client.V1PodSpec(containers=[main])
    )
    apps.create_namespaced_stateful_set(
        ns,
        client.V1StatefulSet(
            metadata=client.V1ObjectMeta(name="ps"),
            spec=client.V1StatefulSetSpec(
                service_name="ps",
                replicas=2,
                pod_management_policy="Parallel",
                selector=client.V1LabelSelector(match_labels=labels),
                template=template,
            ),
        ),
    )

    def ps_pods():
        pods = core.list_namespaced_pod(ns, label_selector="app=ps").items
        return len(pods) == 2 and running_with_ip(pods) and pods

    pods = wait_for("2 Running PS pods", ps_pods)
    assert sorted(p.metadata.name for p in pods) == ["ps-0", "ps-1"]
    assert {p.spec.node_name for p in pods} <= set(k8s_cluster.nodes)
    assert all(p.spec.subdomain == "ps" for p in pods)

    # The endpointslice controller publishes both pods behind the headless Service.
    disc = client.DiscoveryV1Api(k8s_api)

    def endpoints():
        slices = disc.list_namespaced_endpoint_slice(ns, label_selector="kubernetes.io/service-name=ps").items
        return sorted(e.hostname for s in slices for e in s.endpoints or []) == ["ps-0", "ps-1"]

    wait_for("EndpointSlice with ps-0, ps-1", endpoints)

    sts = apps.read_namespaced_stateful_set("ps", ns)
    assert all(p.metadata.owner_references[0].uid == sts.metadata.uid for p in pods)
    apps.delete_namespaced_stateful_set("ps", ns, propagation_policy="Background")
    wait_for(
        "garbage collector to remove the PS pods",
        lambda: not core.list_namespaced_pod(ns, label_selector="app=ps").items,
        timeout=90,
    )


def test_rbac_and_service_account_tokens(
    k8s_cluster: harness.ControlPlane, k8s_api, k8s_namespace: str, tmp_path
) -> None:
    """RBAC is on: a fresh ServiceAccount's bound token is authenticated but denied until a
    Role grants it; the grant does not reach other namespaces."""
    core, rbac, ns = client.CoreV1Api(k8s_api), client.RbacAuthorizationV1Api(k8s_api), k8s_namespace
    core.create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="bot"))
    )
    token = k8s_cluster.service_account_token(ns, "bot")
    bot = client.CoreV1Api(k8s_cluster.api_client(token=token))
    with pytest.raises(client.ApiException) as denied:
        bot.list_namespaced_pod(ns)
    assert denied.value.status == 403 and f"system:serviceaccount:{ns}:bot" in denied.value.body

    rbac.create_namespaced_role(
        ns,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        ns,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="bot-reads-pods"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="bot", namespace=ns)],
        ),
    )

    def allowed() -> bool:
        try:
            bot.list_namespaced_pod(ns)
            return True
        except client.ApiException as e:
            assert e.status == 403
            return False

    wait_for("the RoleBinding to take effect", allowed, timeout=30)
    with pytest.raises(client.ApiException) as other_ns:
        bot.list_namespaced_pod("default")
    assert other_ns.value.status == 403

    # A kubeconfig for that identity works with the standard loader.
    from kubernetes import config as kube_config

    path = k8s_cluster.kubeconfig_for_token(tmp_path / "bot.kubeconfig", token, "bot", ns)
    api = kube_config.new_client_from_config(str(path))
    assert client.CoreV1Api(api).list_namespaced_pod(ns).items == []
    api.close()
