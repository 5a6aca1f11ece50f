"""The cluster lifecycle against the real API server, Job controller and
garbage collector (KWOK plays the nodes and the training processes).

- create: every rendered object exists, in every mode; a second server-side apply writes
  nothing (resourceVersions unchanged); the server's strict schema validation and its
  admission (PodSecurity ``restricted`` on the namespace) accept everything, including
  the pods the controllers make from the templates;
- between_graph: all workers complete -> the wait succeeds -> the PS are deleted after
  the grace period -> the garbage collector removes their pods;
- parameter_server (deferrable, through the real trigger): the chief completes -> the
  workers and PS are deleted;
- all_reduce with ``cleanup="all"``: nothing is left.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from k8s import harness
from kubernetes import client

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

RENDERED = [
    ("batch/v1", "jobs"),
    ("v1", "services"),
    ("v1", "persistentvolumeclaims"),
    ("networking.k8s.io/v1", "networkpolicies"),
]


def _specs(ns: str) -> dict[str, dict]:
    toleration = {"key": "tfk.test/gpu", "operator": "Exists", "effect": "NoSchedule"}
    full = _tfk.spec(
        ns,
        "between_graph",
        workers=3,
        ps=2,
        name="full",
        ps_grace_seconds=5,
        max_duration_seconds=3600,
        retries_per_index=2,
        permanent_exit_codes=[1, 2, 3],
        legacy_tf1_flags=True,
        args=["--tfk_steps", "100", "--price=$(NOT_EXPANDED)"],
        env={"EXTRA": "$(HOME) stays literal"},
        labels={"team": "ml"},
        image_pull_policy="Always",
        image_pull_secrets=["registry-creds"],
        storage={
            "data": {"size": "1Gi"},
            "logs": {"claim": "tfk-logs"},
            "models": {"size": "2Gi", "access_mode": "ReadWriteOnce"},
            "storage_class": "standard",
        },
        worker={
            "replicas": 3,
            "resources": {
                "cpu": "100m",
                "memory": "64Mi",
                "cpu_limit": "1",
                "memory_limit": "128Mi",
                "gpus": 1,
            },
            "node_selector": {"pool": "gpu"},
            "tolerations": [toleration],
            "env": {"ROLE_ONLY": "x"},
        },
    )
    full["ps"]["resources"] = {"cpu": "100m", "memory": "64Mi"}
    return {
        # Everything a spec can set, on the seeds' mode.
        "between_graph": full,
        "parameter_server": _tfk.spec(
            ns, "parameter_server", workers=3, ps=2, name="ps-mode", evaluator={"replicas": 1}
        ),
        "all_reduce": _tfk.spec(ns, "all_reduce", workers=3, ps=0, name="allreduce"),
        "namespace_per_training": _tfk.spec(
            ns, "between_graph", workers=2, ps=1, name="own-ns", namespace_per_training=True
        ),
    }


def _rendered_rvs(api, namespace: str, cluster: str) -> dict[str, str]:
    objs = _tfk.objects(api, namespace, cluster, kinds=RENDERED)
    return {k: o["metadata"]["resourceVersion"] for k, o in objs.items()}


def _settled_rvs(
    api, namespace: str, cluster: str, quiet: float = 1.5, timeout: float = 30
) -> dict[str, str]:
    """The rendered objects' resourceVersions once the controllers stopped updating their
    status (no change for ``quiet`` seconds)."""
    deadline = time.monotonic() + timeout
    last, since = _rendered_rvs(api, namespace, cluster), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = _rendered_rvs(api, namespace, cluster)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return now
    raise AssertionError(f"objects of {cluster} kept changing: {last}")


def test_create_every_mode_exists_is_idempotent_and_admitted(k8s_api, tfk_ns, tfk_conn) -> None:
    backend = KubernetesBackend(conn_id=tfk_conn)
    identity = RunIdentity("k8s_it", "train", "scheduled__2026-01-01T00:00:00+00:00", -1)
    core = client.CoreV1Api(k8s_api)
    for mode, data in _specs(tfk_ns).items():
        spec = TFClusterSpec.from_dict(data)
        ref = backend.create(spec, identity)
        ns = ref.namespace
        if spec.namespace_per_training:
            assert ns == f"{tfk_ns}-{spec.name}"
            core.patch_namespace(
                ns, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
            )
        manifests = render(spec, identity)
        found = _tfk.objects(k8s_api, ns, spec.name)
        expected = {f"{_tfk.PLURAL[m['kind']]}/{m['metadata']['name']}" for m in manifests}
        assert expected <= set(found), (mode, sorted(expected - set(found)))
        for m in manifests:  # what the server stored is what was rendered
            obj = found[f"{_tfk.PLURAL[m['kind']]}/{m['metadata']['name']}"]
            assert obj["metadata"]["labels"].items() >= m["metadata"]["labels"].items(), mode
            for ann, value in (m["metadata"].get("annotations") or {}).items():
                assert obj["metadata"]["annotations"][ann] == value
            mf = obj["metadata"]["managedFields"]
            assert [f["manager"] for f in mf if f["operation"] == "Apply"] == ["airflow-tfk"]

        # The controllers made every task's pod, and PodSecurity admitted it. (Pods with
        # an unbound new PVC or an unmatched node selector exist but stay Pending.)
        tasks = sum(r.replicas for r in spec.roles().values())
        pods = _tfk.wait_for(
            f"{tasks} pods of {mode}",
            lambda ns=ns, n=spec.name, t=tasks: (p := _tfk.pods(k8s_api, ns, n)) and len(p) == t and p,
            timeout=30,
        )
        for p in pods:
            sc = p.spec.containers[0].security_context
            assert sc.run_as_non_root and sc.allow_privilege_escalation is False
            assert p.spec.automount_service_account_token is False
        if mode == "all_reduce":
            _tfk.wait_for(
                "all_reduce pods running",
                lambda ns=ns, n=spec.name: all(
                    p.status.phase == "Running" and p.status.pod_ip for p in _tfk.pods(k8s_api, ns, n)
                ),
            )
        job_events = [
            e
            for e in core.list_namespaced_event(ns).items
            if e.reason in ("FailedCreate", "FailedValidation")
        ]
        assert not job_events, [(e.involved_object.name, e.message) for e in job_events]

        # Server-side apply again: nothing changes on the server. (Kubernetes 1.36 quirk:
        # the first no-op apply of a PVC after its creation stores a byte-different but
        # JSON-identical object - only its resourceVersion moves; every later one is a
        # true no-op. So PVCs are compared by content on the first re-apply.)
        before_objs = _tfk.objects(k8s_api, ns, spec.name, kinds=RENDERED)
        before = _settled_rvs(k8s_api, ns, spec.name)
        assert len(before) == len(manifests), sorted(before)
        backend.create(spec, identity)
        after = _rendered_rvs(k8s_api, ns, spec.name)
        pvcs = {k for k in before if k.startswith("persistentvolumeclaims/")}
        assert {k: v for k, v in after.items() if k not in pvcs} == {
            k: v for k, v in before.items() if k not in pvcs
        }, mode
        after_objs = _tfk.objects(k8s_api, ns, spec.name, kinds=RENDERED)
        for k in pvcs:
            for o in (before_objs[k], after_objs[k]):
                o["metadata"].pop("resourceVersion")
            assert after_objs[k] == before_objs[k], k
        backend.create(spec, identity)
        assert _rendered_rvs(k8s_api, ns, spec.name) == after, mode

    # Strict schema validation of every kind, as a server-side dry run of each manifest:
    # no unknown, duplicate or dropped field, no warning.
    spec = TFClusterSpec.from_dict(_specs(tfk_ns)["between_graph"])
    for m in render(spec, identity):
        status, warning = _tfk.apply_dry_run(k8s_api, m, tfk_ns)
        assert status == 200 and not warning, (m["kind"], warning)
    # ... and the server refuses an unknown field, so that check is not vacuous. (Server-side
    # apply cannot build a typed patch with it: a 500, whatever fieldValidation says.)
    bad = render(spec, identity)[-1]
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(client.ApiException) as refused:
        k8s_api.call_api(
            f"/apis/batch/v1/namespaces/{tfk_ns}/jobs/{bad['metadata']['name']}",
            "PATCH",
            query_params=[("fieldManager", "t"), ("fieldValidation", "Strict"), ("dryRun", "All")],
            header_params={"Content-Type": "application/apply-patch+yaml"},
            body=bad,
            auth_settings=["BearerToken"],
        )
    assert refused.value.status in (422, 500), refused.value.body
    assert "imagePullPolicyy: field not declared in schema" in refused.value.body

    for data in _specs(tfk_ns).values():
        spec = TFClusterSpec.from_dict(data)
        backend.delete(ClusterRef(spec.name, spec.namespace_name))
    for data in _specs(tfk_ns).values():
        spec = TFClusterSpec.from_dict(data)
        _tfk.wait_no_leftovers(k8s_api, spec.namespace_name, spec.name, timeout=90)


def _gone(api, ns: str, cluster: str, plural_names: list[str]) -> bool:
    present = set(_tfk.objects(api, ns, cluster))
    return not (present & set(plural_names))


def test_between_graph_success_deletes_ps_after_grace_and_gc_removes_pods(
    k8s_api, tfk_ns, tfk_conn, capfd
) -> None:
    ctx = _tfk.task_context("manual__bg")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, "between_graph", workers=3, ps=2, ps_grace_seconds=2))
    with _tfk.PodDriver(k8s_api, tfk_ns, name) as driver:
        result = op.execute(ctx)
    returned = time.time()
    assert result["outcome"] == "succeeded" and result["name"] == name
    assert not driver.errors
    out = capfd.readouterr().out
    assert "training succeeded" in out and "deleting ps in 2 s" in out
    assert f"deleted ps of cluster {name}" in out
    # The PS were deleted no earlier than the grace period after the last worker finished.
    last_done = max(driver.done.values())
    assert returned - last_done >= 2.0

    left = _tfk.objects(k8s_api, tfk_ns, name)
    assert f"jobs/{name}-ps" not in left and f"services/{name}-ps" not in left
    job = left[f"jobs/{name}-worker"]  # cleanup="ps": the finished workers stay, for logs
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
    assert job["status"]["succeeded"] == 3
    # The garbage collector removes the PS pods (and slices) of the deleted owners.
    t_gc = time.monotonic()
    _tfk.wait_for(
        "the PS pods to be garbage-collected",
        lambda: (
            not _tfk.pods(k8s_api, tfk_ns, name, "ps")
            and _gone(
                k8s_api,
                tfk_ns,
                name,
                [
                    f"controllerrevisions/{k.split('/')[1]}"
                    for k in left
                    if k.startswith("controllerrevisions/")
                ],
            )
        ),
        timeout=60,
    )
    print(f"GC removed the PS pods {time.monotonic() - t_gc:.1f}s after the operator returned")
    workers = _tfk.pods(k8s_api, tfk_ns, name, "worker")
    assert sorted(p.status.phase for p in workers) == ["Succeeded"] * 3


def _run_trigger(trigger) -> dict:
    async def first():
        async for event in trigger.run():
            return event.payload

    return asyncio.run(first())


def test_parameter_server_deferrable_chief_done_deletes_workers_and_ps(
    k8s_api, tfk_ns, tfk_conn, capfd
) -> None:
    from airflow_tfk._airflow.compat import TaskDeferred  # where the installed Airflow has it

    ctx = _tfk.task_context("manual__psmode")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        tfk_ns, _tfk.spec(tfk_ns, "parameter_server", workers=2, ps=1, ps_grace_seconds=1), deferrable=True
    )
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    path, kwargs = deferred.value.trigger.serialize()  # what the triggerer gets
    assert path == "airflow_tfk.triggers.cluster.TFClusterDoneTrigger"
    trigger = type(deferred.value.trigger)(**kwargs)

    # Only the chief's success decides (workers in PS mode serve until told to stop).
    def chief_only(pod):
        role = pod.metadata.labels.get(naming.LABEL_ROLE)
        return {harness.EXIT_CODE: "0", harness.EXIT_DELAY: "1s"} if role == "chief" else None

    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=chief_only):
        event = _run_trigger(trigger)
    assert event["status"] == "success", event
    result = getattr(op, deferred.value.method_name)(ctx, event, **deferred.value.kwargs)
    assert result["outcome"] == "succeeded"
    assert "deleted ps, worker of cluster" in capfd.readouterr().out

    left = _tfk.objects(k8s_api, tfk_ns, name)
    for gone in (
        f"jobs/{name}-worker",
        f"services/{name}-worker",
        f"jobs/{name}-ps",
        f"services/{name}-ps",
    ):
        assert gone not in left
    assert f"jobs/{name}-chief" in left
    _tfk.wait_for(
        "worker and PS pods garbage-collected",
        lambda: not _tfk.pods(k8s_api, tfk_ns, name, "worker") and not _tfk.pods(k8s_api, tfk_ns, name, "ps"),
        timeout=60,
    )
    (chief,) = _tfk.pods(k8s_api, tfk_ns, name, "chief")
    assert chief.status.phase == "Succeeded"


def test_all_reduce_cleanup_all_leaves_nothing(k8s_api, tfk_ns, tfk_conn) -> None:
    ctx = _tfk.task_context("manual__ar")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, "all_reduce", workers=2, ps=0), cleanup="all")
    with _tfk.PodDriver(k8s_api, tfk_ns, name):
        assert op.execute(ctx)["outcome"] == "succeeded"
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
