"""``queue_name`` with the real Kueue controller (sigs.k8s.io/kueue v0.19.2, built from its Go
module by tests/k8s/kueue/build.sh, webhooks included) and the real JobSet controller, on
the KWOK control plane. Each test gets its own quota: a ClusterQueue that only admits from
the test's namespace, with a LocalQueue ``lq`` there.

- quota for one cluster: a second cluster queues (its Jobs stay suspended, the task log
  carries Kueue's pending reason) and is admitted, by Kueue, only when the first finishes;
- a cluster bigger than the quota never starts a single pod, although part of it would fit;
- kill-safety of a queued cluster: ``on_kill`` and a deferred ``execution_timeout`` while
  Kueue holds it leave nothing, Workload included;
- ``layout: jobset`` is admitted as ONE Workload with a pod set per role;
- the ``jobs`` layout with a PS: the PS Job is a Workload like the workers' Job (Kueue's
  batch/job integration only), admitted, and the training succeeds.

KWOK pods run no containers: the tests finish them through the stage annotations
(``_tfk.finish`` / ``_tfk.PodDriver``).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferred
from k8s import addons
from kubernetes import client

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes import KubernetesBackend
from airflow_tfk.errors import TrainingFailed
from airflow_tfk.naming import RunIdentity
from airflow_tfk.policies import Outcome
from airflow_tfk.spec import TFClusterSpec
from airflow_tfk.watch import wait_for_cluster
from k8s_integration import _tfk

pytestmark = [pytest.mark.k8s, pytest.mark.addons("jobset", "kueue")]
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures
IDENTITY = RunIdentity("k8s_it", "train", "scheduled__2026-01-01T00:00:00+00:00", -1)
KUEUE = ("kueue.x-k8s.io", "v1beta2")
JOBSETS = ("jobset.x-k8s.io/v1alpha2", "jobsets")


def _spec(ns: str, mode: str, workers: int, ps: int = 0, **extra: Any) -> dict[str, Any]:
    """A spec whose every task asks for 1 CPU (what the quotas count)."""
    data = _tfk.spec(ns, mode, workers=workers, ps=ps, **extra)
    for role in ("worker", "ps"):
        if role in data:
            data[role]["resources"] = {"cpu": "1"}
    return data


def _queued_jobset(
    conn_id: str, ns: str, name: str, workers: int, queue: str
) -> tuple[KubernetesBackend, TFClusterSpec, ClusterRef]:
    """Create a between_graph JobSet of ``workers`` + 1 PS, 1 CPU each, in LocalQueue ``queue``."""
    backend = KubernetesBackend(conn_id=conn_id)
    data = _spec(ns, "between_graph", workers=workers, ps=1, name=name, layout="jobset", queue_name=queue)
    spec = TFClusterSpec.from_dict(data)
    return backend, spec, backend.create(spec, IDENTITY)


@pytest.fixture(scope="module")
def controllers(request, k8s_cluster, k8s_api) -> Iterator[str]:
    """JobSet, then Kueue (it sets up its JobSet integration only if JobSet's API is
    served), and one ResourceFlavor; yields the flavor's name. Their logs are kept (and
    named) when a test failed."""
    workdir = Path(tempfile.mkdtemp(prefix="tfk-kueue-"))
    failed_before = request.session.testsfailed
    try:
        yield from _controllers(k8s_cluster, k8s_api, workdir)
    finally:
        if request.session.testsfailed > failed_before:
            print(f"JobSet and Kueue controller logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _controllers(k8s_cluster, k8s_api, workdir: Path) -> Iterator[str]:
    jobset = addons.JobSetController(k8s_cluster, workdir / "jobset", addons.jobset_binary())
    kueue = addons.KueueController(k8s_cluster, workdir / "kueue", addons.kueue_binary())
    custom = client.CustomObjectsApi(k8s_api)
    flavor = f"tfk-flavor-{kueue.suffix.rsplit('-', 1)[-1]}"
    (workdir / "jobset").mkdir(parents=True)
    (workdir / "kueue").mkdir(parents=True)
    jobset.start(k8s_api)
    try:
        kueue.start(k8s_api)
        try:
            custom.create_cluster_custom_object(
                *KUEUE,
                "resourceflavors",
                {"apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": flavor}},
            )
            yield flavor
            # while Kueue runs: it holds a finalizer on the flavor while a queue uses it
            custom.delete_cluster_custom_object(*KUEUE, "resourceflavors", flavor)
            _tfk.wait_for(
                "the flavor gone",
                lambda: (
                    not _exists(lambda: custom.get_cluster_custom_object(*KUEUE, "resourceflavors", flavor))
                ),
            )
        finally:
            kueue.stop(k8s_api)
    finally:
        jobset.stop(k8s_api)


def _exists(read: Callable[[], Any]) -> bool:
    try:
        read()
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


@pytest.fixture
def quota(k8s_api, controllers: str, tfk_ns: str) -> Iterator[Callable[[str], str]]:
    """``quota(cpu)``: a ClusterQueue with that much CPU (memory plenty) for this namespace
    only, and the LocalQueue ``lq`` pointing at it. Removed after the test, while Kueue
    still runs (it finalizes them)."""
    custom = client.CustomObjectsApi(k8s_api)
    made: list[tuple[str, str | None]] = []

    def make(cpu: str) -> str:
        cq = f"tfk-cq-{tfk_ns}"
        custom.create_cluster_custom_object(
            *KUEUE,
            "clusterqueues",
            {
                "apiVersion": "/".join(KUEUE),
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tfk_ns}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [
                                {
                                    "name": controllers,
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": cpu},
                                        {"name": "memory", "nominalQuota": "64Gi"},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        )
        made.append(("clusterqueues", cq))
        custom.create_namespaced_custom_object(
            *KUEUE,
            tfk_ns,
            "localqueues",
            {
                "apiVersion": "/".join(KUEUE),
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": tfk_ns},
                "spec": {"clusterQueue": cq},
            },
        )
        made.append(("localqueues", "lq"))
        _tfk.wait_for(
            "the ClusterQueue to be active",
            lambda: _true(custom.get_cluster_custom_object(*KUEUE, "clusterqueues", cq), "Active"),
            timeout=30,
        )
        return "lq"

    yield make
    # A failed test may leave clusters behind: their Workloads would keep the ClusterQueue
    # (Kueue's finalizer) after Kueue stops.
    for version, plural in (JOBSETS, ("batch/v1", "jobs")):
        group, ver = version.split("/")
        if plural == "jobs":
            client.BatchV1Api(k8s_api).delete_collection_namespaced_job(
                tfk_ns, propagation_policy="Background"
            )
        else:
            custom.delete_collection_namespaced_custom_object(group, ver, tfk_ns, plural)
    _no_workloads(k8s_api, tfk_ns)
    for plural, name in reversed(made):
        if plural == "localqueues":
            custom.delete_namespaced_custom_object(*KUEUE, tfk_ns, plural, name)
        else:
            custom.delete_cluster_custom_object(*KUEUE, plural, name)
            _tfk.wait_for(
                f"ClusterQueue {name} gone",
                lambda n=name: (
                    not _exists(lambda: custom.get_cluster_custom_object(*KUEUE, "clusterqueues", n))
                ),
                timeout=60,
            )


def _true(obj: dict | None, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


def _workloads(api, ns: str) -> list[dict]:
    return client.CustomObjectsApi(api).list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"]


def _owned(api, ns: str, kind: str, name: str) -> list[dict]:
    return [
        w
        for w in _workloads(api, ns)
        if any(o["kind"] == kind and o["name"] == name for o in w["metadata"].get("ownerReferences") or [])
    ]


def _pending_reason(api, ns: str, kind: str, name: str) -> str | None:
    """Kueue's message on the owner's Workload while it has no quota reserved."""
    for w in _owned(api, ns, kind, name):
        for c in (w.get("status") or {}).get("conditions") or []:
            if c["type"] == "QuotaReserved" and c["status"] == "False" and c.get("message"):
                return c["message"]
    return None


def _gone(api, ns: str, cluster: str) -> None:
    """Nothing of the cluster left: its labelled objects, its JobSet, and Kueue's Workloads
    for it (the garbage collector removes them with their owners)."""
    _tfk.wait_no_leftovers(api, ns, cluster, timeout=90)
    _tfk.wait_for("no JobSet left", lambda: not _tfk.objects(api, ns, cluster, kinds=[JOBSETS]), timeout=60)
    _no_workloads(api, ns, cluster)


def _of_cluster(workload: dict, cluster: str | None) -> bool:
    owners = workload["metadata"].get("ownerReferences") or []
    return cluster is None or any(o["name"] == cluster or o["name"].startswith(f"{cluster}-") for o in owners)


def _no_workloads(api, ns: str, cluster: str | None = None, timeout: float = 60) -> None:
    def left() -> list[dict]:
        return [w for w in _workloads(api, ns) if _of_cluster(w, cluster)]

    try:
        _tfk.wait_for("no Workload left", lambda: not left(), timeout=timeout)
    except AssertionError:
        summary = [
            (
                w["metadata"]["name"],
                w["metadata"].get("ownerReferences"),
                (w.get("status") or {}).get("conditions"),
            )
            for w in left()
        ]
        raise AssertionError(f"Workloads of {cluster or 'any cluster'} left in {ns}: {summary}") from None


class _Op:
    """The operator's blocking ``execute`` in a thread (as a worker runs it)."""

    def __init__(self, op, ctx) -> None:
        self.op, self.ctx = op, ctx
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = self.op.execute(self.ctx)
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            self.error = exc

    def join(self, timeout: float = 90) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the operator did not return"


def test_a_second_cluster_queues_until_the_first_finishes(
    k8s_api, controllers, quota, tfk_ns, tfk_conn, capfd
):
    """Quota for one cluster (2 CPU); two all_reduce clusters of 2 x 1 CPU, Jobs layout."""
    lq = quota("2")
    backend = KubernetesBackend(conn_id=tfk_conn)
    first = TFClusterSpec.from_dict(_spec(tfk_ns, "all_reduce", workers=2, ps=0, name="first", queue_name=lq))
    first_ref = backend.create(first, IDENTITY)
    _tfk.wait_for(
        "the first cluster's 2 pods", lambda: len(_tfk.pods(k8s_api, tfk_ns, "first")) == 2, timeout=60
    )
    assert all(_true(w, "Admitted") for w in _owned(k8s_api, tfk_ns, "Job", "first-worker"))

    ctx = _tfk.task_context("manual__second")
    second = _tfk.cluster_name(ctx)
    spec = _spec(tfk_ns, "all_reduce", workers=2, ps=0, queue_name=lq)
    with _tfk.PodDriver(k8s_api, tfk_ns, second):
        run = _Op(_tfk.make_op(tfk_ns, spec, progress_interval=1), ctx)
        reason = _tfk.wait_for(
            "Kueue's pending reason on the second cluster",
            lambda: _pending_reason(k8s_api, tfk_ns, "Job", f"{second}-worker"),
            timeout=60,
        )
        assert f"insufficient unused quota for cpu in flavor {controllers}, 2 more needed" in reason, reason
        log: list[str] = []
        line = f"queued: Job {second}-worker queued in LocalQueue {lq}: {reason}"
        try:
            _tfk.wait_for(
                "the reason in the task log",
                lambda: log.append(capfd.readouterr().out) or line in "".join(log),
                timeout=30,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nwanted: {line}\nlog:\n{''.join(log)[-4000:]}") from None
        job = client.BatchV1Api(k8s_api).read_namespaced_job(f"{second}-worker", tfk_ns)
        assert job.spec.suspend is True and not _tfk.pods(k8s_api, tfk_ns, second)

        _tfk.finish(k8s_api, tfk_ns, "first", "worker", 0, count=2)
        verdict = wait_for_cluster(
            backend, first_ref, first.mode, {"worker": 2}, timeout=60, progress_interval=3600
        )
        assert verdict.outcome is Outcome.SUCCEEDED, verdict
        run.join()
    assert run.error is None and run.result["outcome"] == "succeeded", (run.error, run.result)
    done = client.BatchV1Api(k8s_api).read_namespaced_job("first-worker", tfk_ns).status.completion_time
    started = min(p.metadata.creation_timestamp for p in _tfk.pods(k8s_api, tfk_ns, second))
    assert started >= done, (started, done)  # admitted only once the first released its quota
    backend.delete(first_ref)
    backend.delete(ClusterRef(second, tfk_ns))  # the operator's default clean-up keeps finished Jobs
    _gone(k8s_api, tfk_ns, "first")
    _gone(k8s_api, tfk_ns, second)


def test_a_cluster_bigger_than_the_quota_never_starts_a_pod(k8s_api, controllers, quota, tfk_ns, tfk_conn):
    """4 CPU asked, 3 in the quota: 3 of the 4 tasks would fit, none may start."""
    lq = quota("3")
    backend, spec, ref = _queued_jobset(tfk_conn, tfk_ns, "big", 3, lq)
    reason = _tfk.wait_for(
        "Kueue's pending reason", lambda: _pending_reason(k8s_api, tfk_ns, "JobSet", "big"), timeout=60
    )
    # Kueue's own words (v0.19: the PS's 1 CPU, then the workers' 3, against the 3 of the quota).
    assert f"insufficient quota for cpu in flavor {controllers}, " in reason, reason
    assert "requests (1) + current podset request (3) > maximum capacity (3)" in reason, reason
    lines: list[str] = []
    verdict = wait_for_cluster(
        backend, ref, spec.mode, {"ps": 1, "worker": 3}, timeout=4, progress_interval=1, emit=lines.append
    )
    assert verdict.outcome is Outcome.RUNNING  # still waiting
    assert f"queued: JobSet big queued in LocalQueue {lq}: {reason}" in lines, lines
    assert _tfk.pods(k8s_api, tfk_ns, "big") == []
    js = _tfk.objects(k8s_api, tfk_ns, "big", kinds=[JOBSETS])["jobsets/big"]
    assert js["spec"]["suspend"] is True
    backend.delete(ref)
    _gone(k8s_api, tfk_ns, "big")


def test_a_queued_cluster_killed_or_timed_out_leaves_nothing(k8s_api, quota, tfk_ns, tfk_conn):
    """on_kill of the blocking operator, and the deferred execution_timeout, while Kueue
    holds the cluster (1 CPU of quota, 2 asked)."""
    lq = quota("1")
    spec = _spec(tfk_ns, "all_reduce", workers=2, ps=0, queue_name=lq)

    ctx = _tfk.task_context("manual__killqueued")
    name = _tfk.cluster_name(ctx)
    run = _Op(_tfk.make_op(tfk_ns, spec, progress_interval=2), ctx)  # a queued wait re-looks every 2 s
    _tfk.wait_for(
        "the cluster queued", lambda: _pending_reason(k8s_api, tfk_ns, "Job", f"{name}-worker"), timeout=60
    )
    run.op.on_kill()
    run.join(60)
    assert isinstance(run.error, TrainingFailed), run.error
    _gone(k8s_api, tfk_ns, name)

    ctx = _tfk.task_context("manual__timeoutqueued")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, spec, deferrable=True, execution_timeout=timedelta(seconds=4))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    _tfk.wait_for(
        "the cluster queued", lambda: _pending_reason(k8s_api, tfk_ns, "Job", f"{name}-worker"), timeout=60
    )
    trigger = type(deferred.value.trigger)(
        **deferred.value.trigger.serialize()[1]
    )  # as the triggerer builds it

    async def first_event() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(first_event())
    assert event["status"] == "timeout", event
    with pytest.raises(AirflowTaskTimeout):
        op.execute_complete(ctx, event, **deferred.value.kwargs)
    assert not _tfk.pods(k8s_api, tfk_ns, name)
    _gone(k8s_api, tfk_ns, name)


def test_the_jobset_layout_is_admitted_as_one_workload(k8s_api, quota, tfk_ns, tfk_conn):
    """between_graph, 2 workers + 1 PS of 1 CPU with 3 CPU of quota: one Workload, owned
    by the JobSet, a pod set per role; admitted whole, it runs and succeeds."""
    lq = quota("3")
    backend, spec, ref = _queued_jobset(tfk_conn, tfk_ns, "whole", 2, lq)
    _tfk.wait_for("3 pods", lambda: len(_tfk.pods(k8s_api, tfk_ns, "whole")) == 3, timeout=60)
    workloads = _workloads(k8s_api, tfk_ns)
    assert len(workloads) == 1, [w["metadata"]["name"] for w in workloads]
    (wl,) = workloads
    assert [(o["kind"], o["name"]) for o in wl["metadata"]["ownerReferences"]] == [("JobSet", "whole")]
    assert {p["name"]: p["count"] for p in wl["spec"]["podSets"]} == {"ps": 1, "worker": 2}
    assert _true(wl, "Admitted"), wl["status"]
    usage = {a["name"]: a["resourceUsage"]["cpu"] for a in wl["status"]["admission"]["podSetAssignments"]}
    assert usage == {"ps": "1", "worker": "2"}, usage
    _tfk.finish(k8s_api, tfk_ns, "whole", "worker", 0, count=2)
    verdict = wait_for_cluster(
        backend, ref, spec.mode, {"ps": 1, "worker": 2}, timeout=60, progress_interval=3600
    )
    assert verdict.outcome is Outcome.SUCCEEDED, verdict
    _tfk.wait_for(
        "Kueue to mark the Workload finished",
        lambda: _true(_owned(k8s_api, tfk_ns, "JobSet", "whole")[0], "Finished"),
        timeout=60,
    )
    backend.delete(ref)
    _gone(k8s_api, tfk_ns, "whole")


def test_the_jobs_layout_with_a_ps_needs_only_the_job_integration(k8s_api, quota, tfk_ns, tfk_conn, capfd):
    """between_graph in the ``jobs`` layout, 2 workers + 1 PS of 1 CPU, 3 CPU of quota:
    the PS is a Job, so Kueue's batch/job integration queues it like the workers, with no
    pod or statefulset integration. Each Job is one
    Workload; both are admitted, the training succeeds, and the PS Job is cleaned up."""
    lq = quota("3")
    ctx = _tfk.task_context("manual__jobsps")
    name = _tfk.cluster_name(ctx)
    spec = _spec(tfk_ns, "between_graph", workers=2, ps=1, queue_name=lq)
    with _tfk.PodDriver(k8s_api, tfk_ns, name):
        run = _Op(_tfk.make_op(tfk_ns, spec), ctx)
        _tfk.wait_for("3 pods", lambda: len(_tfk.pods(k8s_api, tfk_ns, name)) == 3, timeout=60)
        usage = {}
        for role in ("ps", "worker"):
            (wl,) = _owned(k8s_api, tfk_ns, "Job", f"{name}-{role}")
            assert _true(wl, "Admitted"), wl["status"]
            (assignment,) = wl["status"]["admission"]["podSetAssignments"]
            usage[role] = assignment["resourceUsage"]["cpu"]
        assert usage == {"ps": "1", "worker": "2"}, usage
        run.join()
    assert run.error is None and run.result["outcome"] == "succeeded", (run.error, run.result)
    assert f"deleted ps of cluster {name}" in capfd.readouterr().out
    _tfk.wait_for("the PS pod gone", lambda: not _tfk.pods(k8s_api, tfk_ns, name, "ps"), timeout=60)
    _tfk.wait_for(
        "the PS Job's Workload gone", lambda: not _owned(k8s_api, tfk_ns, "Job", f"{name}-ps"), timeout=60
    )
    KubernetesBackend(conn_id=tfk_conn).delete(ClusterRef(name, tfk_ns))
    _gone(k8s_api, tfk_ns, name)


# Namespace per training under Kueue (its copies and LocalQueue): with these controllers,
# started once for both modules.
from k8s_integration._kueue_own_namespace import (  # noqa: E402, F401 - collected here
    sources,
    test_own_namespace_gets_pull_secret_account_and_queue_and_goes_with_the_run,
)
