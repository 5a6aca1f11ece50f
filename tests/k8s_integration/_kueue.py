"""Kueue and JobSet for the KWOK tests that need them: the controllers (built from their Go
modules by tests/k8s/<name>/build.sh), a per-test quota, and reads of Kueue's Workloads.

Import the fixtures into a test module (``controllers, quota = _kueue.controllers,
_kueue.quota``); they are module-scoped, so one module starts the controllers once.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from k8s import addons
from kubernetes import client

from airflow_tfk.core import naming
from k8s_integration import _tfk

KUEUE = ("kueue.x-k8s.io", "v1beta2")
JOBSETS = ("jobset.x-k8s.io/v1alpha2", "jobsets")


@pytest.fixture(scope="module")
def controllers(request, k8s_cluster, k8s_api) -> Iterator[str]:
    """JobSet, then Kueue (it sets up its JobSet integration only if JobSet's API is
    served), and one ResourceFlavor; yields the flavor's name. Their logs are kept (and
    named) when a test failed."""
    workdir = Path(tempfile.mkdtemp(prefix="tfk-kueue-"))
    failed_before = request.session.testsfailed
    try:
        yield from _start_controllers(k8s_cluster, k8s_api, workdir)
    finally:
        if request.session.testsfailed > failed_before:
            print(f"JobSet and Kueue controller logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _start_controllers(k8s_cluster, k8s_api, workdir: Path) -> Iterator[str]:
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
                    not exists(lambda: custom.get_cluster_custom_object(*KUEUE, "resourceflavors", flavor))
                ),
            )
        finally:
            kueue.stop(k8s_api)
    finally:
        jobset.stop(k8s_api)


def exists(read: Callable[[], Any]) -> bool:
    try:
        read()
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def make_queues(
    custom: client.CustomObjectsApi,
    flavor: str,
    namespace: str,
    cpu: str,
    admits: Sequence[str],
    made: list[tuple[str, str]],
) -> str:
    """The ClusterQueue ``tfk-cq-<namespace>`` with ``cpu`` of ``flavor`` (memory plenty),
    admitting workloads from the namespaces ``admits``, and the LocalQueue ``lq`` in
    ``namespace`` pointing at it; returns once Kueue has made the ClusterQueue active. Each
    is added to ``made`` (plural, name) as soon as it exists, for the caller's clean-up."""
    cq = f"tfk-cq-{namespace}"
    names = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(admits)}
    custom.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {"matchExpressions": [names]},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": flavor,
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
        namespace,
        "localqueues",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": namespace},
            "spec": {"clusterQueue": cq},
        },
    )
    made.append(("localqueues", "lq"))
    _tfk.wait_for(
        "the ClusterQueue to be active",
        lambda: true(custom.get_cluster_custom_object(*KUEUE, "clusterqueues", cq), "Active"),
        timeout=30,
    )
    return cq


@pytest.fixture
def quota(k8s_api, controllers: str, tfk_ns: str) -> Iterator[Callable[[str], str]]:
    """``quota(cpu)``: a ClusterQueue with that much CPU (memory plenty) for this namespace
    only, and the LocalQueue ``lq`` pointing at it. Removed after the test, while Kueue
    still runs (it finalizes them)."""
    custom = client.CustomObjectsApi(k8s_api)
    made: list[tuple[str, str]] = []

    def make(cpu: str) -> str:
        make_queues(custom, controllers, tfk_ns, cpu, [tfk_ns], made)
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
    no_workloads(k8s_api, tfk_ns)
    for plural, name in reversed(made):
        if plural == "localqueues":
            custom.delete_namespaced_custom_object(*KUEUE, tfk_ns, plural, name)
        else:
            custom.delete_cluster_custom_object(*KUEUE, plural, name)
            _tfk.wait_for(
                f"ClusterQueue {name} gone",
                lambda n=name: (
                    not exists(lambda: custom.get_cluster_custom_object(*KUEUE, "clusterqueues", n))
                ),
                timeout=60,
            )


def true(obj: dict | None, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    )


def workloads(api, ns: str) -> list[dict]:
    return client.CustomObjectsApi(api).list_namespaced_custom_object(*KUEUE, ns, "workloads")["items"]


def owned(api, ns: str, kind: str, name: str) -> list[dict]:
    return [
        w
        for w in workloads(api, ns)
        if any(o["kind"] == kind and o["name"] == name for o in w["metadata"].get("ownerReferences") or [])
    ]


def pending_reason(api, ns: str, kind: str, name: str) -> str | None:
    """Kueue's message on the owner's Workload while it has no quota reserved."""
    for w in owned(api, ns, kind, name):
        for c in (w.get("status") or {}).get("conditions") or []:
            if c["type"] == "QuotaReserved" and c["status"] == "False" and c.get("message"):
                return c["message"]
    return None


def gone(api, ns: str, cluster: str) -> None:
    """Nothing of the cluster left: its labelled objects, its JobSet, and Kueue's Workloads
    for it (the garbage collector removes them with their owners)."""
    _tfk.wait_no_leftovers(api, ns, cluster, timeout=90)
    _tfk.wait_for("no JobSet left", lambda: not _tfk.objects(api, ns, cluster, kinds=[JOBSETS]), timeout=60)
    no_workloads(api, ns, cluster)


def of_cluster(workload: dict, cluster: str | None) -> bool:
    owners = workload["metadata"].get("ownerReferences") or []
    return cluster is None or any(o["name"] == cluster or o["name"].startswith(f"{cluster}-") for o in owners)


def no_workloads(api, ns: str, cluster: str | None = None, timeout: float = 60) -> None:
    def left() -> list[dict]:
        return [w for w in workloads(api, ns) if of_cluster(w, cluster)]

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


class OperatorThread:
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
        except BaseException as exc:  # asserted by the test
            self.error = exc

    def join(self, timeout: float = 90) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the operator did not return"


def active(workload: dict) -> bool:
    """Holds quota: admitted by Kueue and not finished."""
    return true(workload, "Admitted") and not true(workload, "Finished")


class ConcurrencySampler:
    """Samples a namespace every ``every`` seconds on a thread: the Workloads holding quota,
    those waiting for it, the running pods and the clusters that have Jobs, each at its highest, and every
    cluster name seen with Jobs (in order of first sight)."""

    def __init__(self, api, ns: str, every: float = 0.1) -> None:
        self.api, self.ns, self.every = api, ns, every
        self.peak_admitted = self.peak_pending = self.peak_pods = self.peak_clusters = 0
        self.samples = 0
        self.seen: dict[str, None] = {}
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="concurrency-sampler", daemon=True)

    def _run(self) -> None:
        core, batch = client.CoreV1Api(self.api), client.BatchV1Api(self.api)
        while not self._stop.is_set():
            try:
                found = workloads(self.api, self.ns)
                admitted = sum(active(w) for w in found)
                pending = sum(not true(w, "QuotaReserved") and not true(w, "Finished") for w in found)
                pods = core.list_namespaced_pod(self.ns, label_selector=naming.LABEL_CLUSTER).items
                running = sum(p.status.phase == "Running" for p in pods)
                jobs = batch.list_namespaced_job(self.ns, label_selector=naming.LABEL_CLUSTER).items
                clusters = {j.metadata.labels[naming.LABEL_CLUSTER] for j in jobs}
            except Exception as exc:  # reported by stop()
                self.errors.append(exc)
            else:
                self.peak_admitted = max(self.peak_admitted, admitted)
                self.peak_pending = max(self.peak_pending, pending)
                self.peak_pods = max(self.peak_pods, running)
                self.peak_clusters = max(self.peak_clusters, len(clusters))
                self.seen.update(dict.fromkeys(sorted(clusters)))
                self.samples += 1
            self._stop.wait(self.every)

    def __enter__(self) -> ConcurrencySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
