"""Namespace per training with what its pods need, on the KWOK control plane with the
real Kueue controller. Collected in test_kueue_controller.py, whose ``controllers``
fixture starts JobSet and Kueue once for both (a module of its own would start them a
second time: ~35 s). The image pull secret and the ServiceAccount are copied from
``namespace`` into ``<namespace>-<name>``, the LocalQueue is made there pointing at the
ClusterQueue its namesake points at, Kueue admits the training's Workload in the new
namespace, and the training succeeds. With ``cleanup: all`` the namespace goes with the
run, and every copy with it. An existing claim is refused with namespace per training
(a PVC binds its volume to its own namespace), naming both fields, before anything is
created.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from airflow_tfk.core.errors import SpecError
from k8s_integration import _kueue, _tfk

KUEUE = ("kueue.x-k8s.io", "v1beta2")
CLUSTER = "own-ns"
WORKLOAD_IDENTITY = {"iam.gke.io/gcp-service-account": "trainer@project.iam.gserviceaccount.com"}


@pytest.fixture
def sources(k8s_api, controllers: str, tfk_ns: str) -> Iterator[str]:
    """In the spec's namespace: a pull secret, a ServiceAccount and the LocalQueue ``lq``,
    whose ClusterQueue admits from the training's own namespace. Yields that ClusterQueue."""
    core, custom = client.CoreV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    auth = base64.b64encode(json.dumps({"auths": {"registry.example": {"auth": "dTpw"}}}).encode()).decode()
    core.create_namespaced_secret(
        tfk_ns,
        {
            "metadata": {"name": "regcred"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": auth},
        },
    )
    core.create_namespaced_service_account(
        tfk_ns,
        {
            "metadata": {"name": "trainer", "annotations": WORKLOAD_IDENTITY},
            "automountServiceAccountToken": False,
        },
    )
    made: list[tuple[str, str]] = []
    cq = _kueue.make_queues(custom, controllers, tfk_ns, "4", [tfk_ns, f"{tfk_ns}-{CLUSTER}"], made)
    yield cq
    custom.delete_namespaced_custom_object(*KUEUE, tfk_ns, "localqueues", "lq")
    custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", cq)


def _spec(ns: str, **extra) -> dict:
    data = _tfk.spec(
        ns,
        "all_reduce",
        workers=2,
        ps=0,
        name=CLUSTER,
        namespace_per_training=True,
        image_pull_secrets=["regcred"],
        service_account="trainer",
        queue_name="lq",
        **extra,
    )
    data["worker"]["resources"] = {"cpu": "1"}
    return data


def _namespace_gone(api, name: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespace(name)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_own_namespace_gets_pull_secret_account_and_queue_and_goes_with_the_run(
    k8s_api, sources, tfk_ns, tfk_conn
) -> None:
    own = f"{tfk_ns}-{CLUSTER}"
    ctx = _tfk.task_context("manual__ownns")

    # An existing claim cannot follow: refused naming both fields, and nothing is made.
    with pytest.raises(SpecError) as err:
        _tfk.make_op(tfk_ns, _spec(tfk_ns, storage={"data": {"claim": "shared-data"}})).execute(ctx)
    assert err.value.field == "storage.data.claim" and "namespace_per_training" in str(err.value)
    assert _namespace_gone(k8s_api, own)

    t0 = time.monotonic()
    seen: dict = {}

    admitted: list[dict] = []
    copies: dict = {}
    core, custom = client.CoreV1Api(k8s_api), client.CustomObjectsApi(k8s_api)

    def rule(pod: client.V1Pod) -> dict[str, str] | None:
        seen.setdefault(pod.metadata.name, pod)  # what the pods were made with
        if not admitted:  # the Jobs are made suspended: a pod means Kueue admitted them
            admitted.extend(_kueue.owned(k8s_api, own, "Job", f"{CLUSTER}-worker"))
            copies["secret"] = core.read_namespaced_secret("regcred", own)
            copies["account"] = core.read_namespaced_service_account("trainer", own)
            copies["queue"] = custom.get_namespaced_custom_object(*KUEUE, own, "localqueues", "lq")
        return _tfk.default_rule(pod)

    with _tfk.PodDriver(k8s_api, own, CLUSTER, rule=rule):
        result = _tfk.make_op(tfk_ns, _spec(tfk_ns), cleanup="all").execute(ctx)
        assert result["outcome"] == "succeeded", result
    took = time.monotonic() - t0

    assert len(seen) == 2, seen
    for pod in seen.values():
        assert pod.spec.service_account_name == "trainer"
        assert [s.name for s in pod.spec.image_pull_secrets] == ["regcred"]
    (wl,) = admitted
    assert _kueue.true(wl, "Admitted") and wl["spec"]["queueName"] == "lq", wl.get("status")
    # what the namespace held while the pods ran: copies of the sources, and the queue
    secret, account, queue = copies["secret"], copies["account"], copies["queue"]
    assert secret.type == "kubernetes.io/dockerconfigjson"
    assert secret.data == core.read_namespaced_secret("regcred", tfk_ns).data
    assert secret.metadata.labels["tfk.airflow.apache.org/cluster"] == CLUSTER
    assert account.metadata.annotations == WORKLOAD_IDENTITY
    assert account.automount_service_account_token is False
    assert queue["spec"]["clusterQueue"] == sources
    _tfk.wait_for("the training's namespace gone", lambda: _namespace_gone(k8s_api, own), timeout=60)
    print(f"namespace per training with Kueue: ran and cleaned up in {took:.1f}s")
