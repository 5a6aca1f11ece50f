"""Layouts and admission against the real API server (KWOK nodes).

- ``layout: jobset``: every mode's JobSet, queued or not, passes a strict server-side dry
  run against JobSet's own CRD (sigs.k8s.io/jobset v0.12.0, tests/k8s/addons.py). A
  misspelt field is refused, so that check is not vacuous. A JobSet cluster is created (the
  policy and the JobSet, labelled) and delete() leaves nothing.
- ``queue_name`` (Jobs layout): the Jobs are created suspended, with Kueue's queue label, and
  the Job controller starts no pod. The task log gives Kueue's pending reason from the
  cluster's Workload, through both Workload APIs the provider reads: ``v1beta2`` (Kueue
  >= 0.15, the CRD of the pinned Kueue) and ``v1beta1`` alone (Kueue <= 0.14: the same CRD
  narrowed to serve and store v1beta1 only for that test, so the v1beta2 request is a 404).
  Deleting the queued cluster leaves nothing, and the garbage collector
  removes the Workload with its owner. The Workload is written here the way Kueue's
  controller writes one (Kueue's CRDs are installed, its controller does not run): a stand-in
  for the controller, with real objects.
- ``capacity_check`` on the KWOK nodes' real allocatable resources: ``fail`` refuses a
  cluster bigger than the nodes before creating anything, and the message names the
  shortfall; ``warn`` creates it and says so; a small cluster fits. All of it runs as the
  least-privilege identity of deploy/rbac plus capacity-check.yaml, with no 403.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator

import pytest
from k8s import addons
from kubernetes import client
from kubernetes.utils import create_from_dict

from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core import naming
from airflow_tfk.core.errors import CapacityError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.render.manifests import render
from airflow_tfk.run.lifecycle import create_or_reattach
from airflow_tfk.run.wait import wait_for_cluster
from airflow_tfk.spec.admission import KUEUE_QUEUE_LABEL
from airflow_tfk.spec.cluster import Mode, TFClusterSpec, quantity_value
from k8s_integration import _tfk
from tests.helpers import rbac_render

rbac = rbac_render()  # deploy/rbac/render.py

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures
IDENTITY = RunIdentity("k8s_it", "train", "scheduled__2026-01-01T00:00:00+00:00", -1)
JOBSETS = ("jobset.x-k8s.io/v1alpha2", "jobsets")
WORKLOADS_CRD = "workloads.kueue.x-k8s.io"


@pytest.fixture(scope="module")
def jobset_api(k8s_api):
    return addons.install(k8s_api, addons.JOBSET)


@pytest.fixture(scope="module")
def kueue_api(k8s_api):
    return addons.install(k8s_api, addons.KUEUE)


def _workloads_served(api, version: str) -> bool:
    try:
        client.CustomObjectsApi(api).list_cluster_custom_object("kueue.x-k8s.io", version, "workloads")
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.fixture(params=["v1beta2", "v1beta1"])
def workload_version(request, k8s_api, kueue_api) -> Iterator[str]:
    """The Workload API version Kueue serves. ``v1beta1``: the pinned CRD narrowed, for the
    test, to what Kueue <= 0.14 served (v1beta1 alone, also as the storage version)."""
    version = request.param
    if version == "v1beta2":
        yield version
        return
    ext = client.ApiextensionsV1Api(k8s_api)

    def serve(only: str | None) -> None:
        crd = ext.read_custom_resource_definition(WORKLOADS_CRD)
        for v in crd.spec.versions:
            v.served = only is None or v.name == only
            v.storage = v.name == (only or "v1beta2")
        ext.replace_custom_resource_definition(WORKLOADS_CRD, crd)

    serve("v1beta1")
    try:
        _tfk.wait_for(
            "v1beta2 Workloads no longer served", lambda: not _workloads_served(k8s_api, "v1beta2"), 30
        )
        yield version
    finally:
        serve(None)
        _tfk.wait_for("v1beta2 Workloads served again", lambda: _workloads_served(k8s_api, "v1beta2"), 30)


def _dry_run(api, manifest: dict, strict: bool = True):
    group, version = manifest["apiVersion"].split("/")
    ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    query = [("fieldManager", "airflow-tfk"), ("dryRun", "All")]
    if strict:
        query.append(("fieldValidation", "Strict"))
    return api.call_api(
        f"/apis/{group}/{version}/namespaces/{ns}/jobsets/{name}",
        "PATCH",
        query_params=query,
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
        body=manifest,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )


def test_jobset_layout_is_valid_against_jobsets_crd_and_cleans_up(k8s_api, jobset_api, tfk_ns, tfk_conn):
    modes = {
        "between_graph": _tfk.spec(tfk_ns, "between_graph", workers=3, ps=2, name="js-bg"),
        "parameter_server": _tfk.spec(
            tfk_ns, "parameter_server", workers=2, ps=1, name="js-ps", evaluator={"replicas": 1}
        ),
        "all_reduce": _tfk.spec(tfk_ns, "all_reduce", workers=3, ps=0, name="js-ar"),
    }
    for data in modes.values():
        for queue in (None, "team-a"):
            spec = TFClusterSpec.from_dict(
                {**data, "layout": "jobset", "queue_name": queue, "max_duration_seconds": 600}
            )
            (js,) = [m for m in render(spec, IDENTITY) if m["kind"] == "JobSet"]
            resp = _dry_run(k8s_api, js)
            assert resp.status in (200, 201) and not resp.getheader("Warning"), resp.getheader("Warning")
            stored = json.loads(resp.data)
            # nothing pruned: what the server would store is what was rendered
            # (the CRD adds its defaults, e.g. failurePolicy.restartStrategy)
            for key in ("network", "successPolicy", "failurePolicy"):
                assert stored["spec"][key].items() >= js["spec"][key].items(), key
            assert stored["spec"]["ttlSecondsAfterFinished"] == js["spec"]["ttlSecondsAfterFinished"]
            assert stored["spec"].get("suspend", False) is (queue is not None)
    # ... and the schema is really checked: a misspelt field is refused
    bad = render(TFClusterSpec.from_dict({**modes["all_reduce"], "layout": "jobset"}), IDENTITY)[-1]
    bad["spec"]["successPolicy"]["operatr"] = "All"
    with pytest.raises(client.ApiException) as refused:
        _dry_run(k8s_api, bad)
    assert "operatr" in refused.value.body

    backend = KubernetesBackend(conn_id=tfk_conn)
    spec = TFClusterSpec.from_dict({**modes["parameter_server"], "layout": "jobset"})
    ref = backend.create(spec, IDENTITY)
    found = _tfk.objects(k8s_api, tfk_ns, spec.name, kinds=[*_tfk.LABELLED_KINDS, JOBSETS])
    assert set(found) == {f"jobsets/{spec.name}", f"networkpolicies/{naming.network_policy_name(spec.name)}"}
    assert backend.exists(ref)
    backend.create(spec, IDENTITY)  # idempotent
    backend.delete(ref)
    _tfk.wait_for(
        "no JobSet left", lambda: not _tfk.objects(k8s_api, tfk_ns, spec.name, kinds=[JOBSETS]), timeout=30
    )
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, spec.name)


def _workload(ns: str, owner: dict, queue: str, version: str) -> dict:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{owner['metadata']['name']}-{uuid.uuid4().hex[:5]}",
            "namespace": ns,
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": owner["spec"]["parallelism"],
                    "template": owner["spec"]["template"],
                }
            ],
        },
    }


def test_queued_jobs_start_no_pod_say_why_and_clean_up(k8s_api, workload_version, tfk_ns, tfk_conn):
    backend = KubernetesBackend(conn_id=tfk_conn)
    spec = TFClusterSpec.from_dict(
        _tfk.spec(tfk_ns, "all_reduce", workers=3, ps=0, name="queued", queue_name="team-a")
    )
    ref = backend.create(spec, IDENTITY)
    batch = client.BatchV1Api(k8s_api)
    job = batch.read_namespaced_job("queued-worker", tfk_ns)
    assert job.spec.suspend is True and job.metadata.labels[KUEUE_QUEUE_LABEL] == "team-a"

    # What Kueue's controller does for a job it cannot admit yet: a Workload owned by the
    # Job, QuotaReserved=False with the reason.
    owner = k8s_api.sanitize_for_serialization(job)
    owner.update(apiVersion="batch/v1", kind="Job")
    custom = client.CustomObjectsApi(k8s_api)
    wl = custom.create_namespaced_custom_object(
        "kueue.x-k8s.io",
        workload_version,
        tfk_ns,
        "workloads",
        _workload(tfk_ns, owner, "team-a", workload_version),
    )
    reason = (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, "
        "3 more needed"
    )
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    custom.patch_namespaced_custom_object_status(
        "kueue.x-k8s.io",
        workload_version,
        tfk_ns,
        "workloads",
        wl["metadata"]["name"],
        {
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": reason,
                        "lastTransitionTime": now,
                    }
                ]
            }
        },
    )

    lines: list[str] = []
    verdict = wait_for_cluster(
        backend, ref, Mode.ALL_REDUCE, {"worker": 3}, timeout=3, progress_interval=1, emit=lines.append
    )
    assert verdict.outcome.value == "running"  # still waiting: nothing runs while queued
    assert f"queued: Job queued-worker queued in LocalQueue team-a: {reason}" in lines, lines
    assert _tfk.pods(k8s_api, tfk_ns, "queued") == []  # suspended: the Job controller made none

    backend.delete(ref)  # kill-safety of a queued cluster: the same delete by label
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, "queued")
    _tfk.wait_for(
        "the garbage collector to remove the Workload with its Job",
        lambda: (
            not custom.list_namespaced_custom_object("kueue.x-k8s.io", workload_version, tfk_ns, "workloads")[
                "items"
            ]
        ),
        timeout=60,
    )


def test_capacity_check_on_the_nodes_real_allocatable(k8s_cluster, k8s_api, tfk_ns, tmp_path):
    nodes = client.CoreV1Api(k8s_api).list_node().items
    total_cpu = sum(quantity_value((n.status.allocatable or {}).get("cpu", "0")) for n in nodes)
    _apply(k8s_api, rbac.manifests(tfk_ns), tfk_ns)
    suffix = f"-{uuid.uuid4().hex[:6]}"
    capacity_rbac = rbac.capacity_check_manifests(tfk_ns, name_suffix=suffix)
    _apply(k8s_api, capacity_rbac, tfk_ns)
    token = k8s_cluster.service_account_token(tfk_ns, rbac.SERVICE_ACCOUNT)
    kubeconfig = k8s_cluster.kubeconfig_for_token(
        tmp_path / "cap.kubeconfig", token, rbac.SERVICE_ACCOUNT, tfk_ns
    )
    try:
        with _tfk.use_connection(kubeconfig, "tfk_cap"):
            backend = KubernetesBackend(conn_id="tfk_cap")
            per_worker = max(1, int(total_cpu))  # 3 workers need 3x what all nodes have
            big = TFClusterSpec.from_dict(
                _tfk.spec(
                    tfk_ns,
                    "all_reduce",
                    workers=3,
                    ps=0,
                    name="too-big",
                    capacity_check="fail",
                    worker={"replicas": 3, "resources": {"cpu": str(per_worker)}},
                )
            )
            lines: list[str] = []
            with pytest.raises(CapacityError) as err:
                create_or_reattach(backend, big, IDENTITY, lines.append)
            text = str(err.value)
            assert f"cpu: needs {3 * per_worker}" in text and "short by" in text, text
            assert "no schedulable node" in text and "nothing was created" in text
            assert _tfk.leftovers(k8s_api, tfk_ns, "too-big") == []

            warned = TFClusterSpec.from_dict({**big.to_dict(), "capacity_check": "warn"})
            ref = create_or_reattach(backend, warned, IDENTITY, lines.append)
            assert any(
                line.startswith("WARNING capacity check: cluster too-big does not fit") for line in lines
            )
            assert _tfk.objects(k8s_api, tfk_ns, "too-big", kinds=[("batch/v1", "jobs")])
            backend.delete(ref)

            small = TFClusterSpec.from_dict(
                _tfk.spec(
                    tfk_ns,
                    "all_reduce",
                    workers=1,
                    ps=0,
                    name="small",
                    capacity_check="fail",
                    worker={"replicas": 1, "resources": {"cpu": "100m", "memory": "64Mi"}},
                )
            )
            ref_small = create_or_reattach(backend, small, IDENTITY, lines.append)
            assert any("capacity check: cluster small fits" in line for line in lines), lines
            backend.delete(ref_small)
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, "too-big")
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, "small")
        assert not [line for line in lines if "403" in line or "orbidden" in line]
    finally:
        _tfk.delete_rbac(k8s_api, capacity_rbac, tfk_ns)


def _apply(api, docs: list[dict], namespace: str) -> None:
    for d in docs:
        create_from_dict(api, d, namespace=d["metadata"].get("namespace", namespace))
