"""The Kubernetes backend, driven through the REAL ``kubernetes`` / ``kubernetes_asyncio``
clients and the cncf provider's ``KubernetesHook`` / ``AsyncKubernetesHook``, over HTTP,
for what the real control plane of tests/k8s_integration cannot show.

The server is ``k8s_double.KubeApiDouble``, a TEST DOUBLE of the Kubernetes API server.
It is here for: injected HTTP faults (429 with Retry-After, 5xx, 409, 403, a failing
apply), a watch that expires (410 Gone), counting every request the backend sends, pod
logs (KWOK runs no containers), and pod states KWOK does not produce (every waiting
reason, a preempted pod's DisruptionTarget, a Job deleted under a running watch). What a
real API server does - create and re-apply every object, the Job and garbage
collector controllers, deadlines, retries of an index, deletion, ownership, per-training
namespaces, the deferrable path - is tested there (test_lifecycle, test_failures,
test_fault_suite, test_ownership, test_rbac, test_kill_safety).

The connection is an ordinary Airflow ``kubernetes`` connection from an environment
variable, pointing at a temporary kubeconfig.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.backends import get_backend
from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesApiError, KubernetesBackend
from airflow_tfk.backends.kubernetes.plan import LIST_PAGE
from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.core.status import ClusterStatus, Phase
from airflow_tfk.kube import retry as _k8s_retry
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec
from tests.backends.k8s_double import KubeApiDouble

ROOT = Path(__file__).resolve().parents[3]
CONN_ID = "tfk_test"
SEL = naming.LABEL_CLUSTER


# -- fixtures -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def double(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiDouble]:
    api = KubeApiDouble().start()
    kubeconfig = api.kubeconfig(str(tmp_path_factory.mktemp("kube") / "config"))
    conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}
    old = os.environ.get(f"AIRFLOW_CONN_{CONN_ID.upper()}")
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(conn)
    yield api
    api.stop()
    if old is None:
        os.environ.pop(f"AIRFLOW_CONN_{CONN_ID.upper()}", None)
    else:
        os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = old


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_k8s_retry, "BASE_DELAY", 0.01)


def make_backend(**kwargs: Any) -> KubernetesBackend:
    backend = KubernetesBackend(conn_id=CONN_ID, **kwargs)
    backend._render = hand_rendered  # type: ignore[method-assign]
    return backend


@pytest.fixture
def backend() -> KubernetesBackend:
    return make_backend()


_names = iter(range(10_000))


def make_spec(workers: int = 3, retries: int = 0, **kwargs: Any) -> TFClusterSpec:
    """An all_reduce cluster: the roles' controllers are the real server's business
    (tests/k8s_integration); here the workers' Job is enough."""
    return TFClusterSpec(
        name=f"tfk-t{next(_names)}",
        image="tf:2",
        command=("python", "t.py"),
        worker=RoleSpec(replicas=workers),
        mode="all_reduce",
        retries_per_index=retries,
        **kwargs,
    )


def hand_rendered(spec: TFClusterSpec, identity: RunIdentity | None = None) -> list[dict]:
    """Manifests of the shape airflow_tfk.render.manifests produces (kept independent of it)."""
    ns = spec.namespace_name

    def meta(name: str, role: str | None = None, namespaced: bool = True) -> dict:
        labels = {
            SEL: spec.name,
            "app.kubernetes.io/managed-by": "airflow-tfk",
            **(identity.labels() if identity else {}),
        }
        if role:
            labels[naming.LABEL_ROLE] = role
        out: dict[str, Any] = {"name": name, "labels": labels}
        if namespaced:
            out["namespace"] = ns
        return out

    def template(role: str) -> dict:
        return {
            "metadata": {
                "labels": {
                    SEL: spec.name,
                    naming.LABEL_ROLE: role,
                    naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
                }
            },
            "spec": {
                "restartPolicy": "Never",
                "subdomain": f"{spec.name}-{role}",
                "containers": [{"name": "tensorflow", "image": spec.image}],
            },
        }

    out: list[dict] = []
    if spec.namespace_per_training:
        out.append({"apiVersion": "v1", "kind": "Namespace", "metadata": meta(ns, namespaced=False)})
    out.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta(f"{spec.name}-logs"),
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
        }
    )
    for role in spec.roles():
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta(f"{spec.name}-{role}", role),
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,
                    "selector": {SEL: spec.name, naming.LABEL_ROLE: role},
                },
            }
        )
    for role, r in spec.roles().items():
        out.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": meta(f"{spec.name}-{role}", role),
                "spec": {
                    "completionMode": "Indexed",
                    "completions": r.replicas,
                    "parallelism": r.replicas,
                    "backoffLimitPerIndex": spec.retries_per_index,
                    "podFailurePolicy": {
                        "rules": [
                            {
                                "action": "Ignore",
                                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                            },
                            {
                                "action": "FailIndex",
                                "onExitCodes": {
                                    "containerName": "tensorflow",
                                    "operator": "In",
                                    "values": list(spec.permanent_exit_codes),
                                },
                            },
                        ]
                    },
                    "template": template(role),
                },
            }
        )
    return out


def labelled(double: KubeApiDouble, ref: ClusterRef) -> list[str]:
    return double.labelled(f"{SEL}={ref.name}")


def task(status: ClusterStatus, role: str, index: int):
    t = status.task(role, index)
    assert t is not None, f"{role}-{index} missing from {status.summary()}"
    return t


# -- create -------------------------------------------------------------------------------
def test_create_applies_every_object_and_second_create_changes_nothing(double, backend):
    spec = make_spec(workers=3)
    mark = double.mark()
    ref = backend.create(spec)
    assert ref == ClusterRef(spec.name, "default")
    manifests = hand_rendered(spec)
    assert double.count("apply", since=mark) == len(manifests)
    assert double.count(since=mark) == len(manifests)  # no discovery, no GET-before-apply
    applies = [r for r in double.requests[mark:] if r.verb == "apply"]
    assert all(
        r.query.get("fieldManager") == "airflow-tfk" and r.query.get("force") == "true" for r in applies
    )
    assert sorted(labelled(double, ref)) == sorted(
        [f"{m['kind']}/{m['metadata']['name']}" for m in manifests]
        + [f"Pod/{double.pod_name(spec.name, 'worker', i)}" for i in range(3)]
    )

    before = {k: o["metadata"]["resourceVersion"] for k, o in double.objects.items()}
    rv_before = double.rv
    backend.create(spec)
    assert double.rv == rv_before, "re-applying the same cluster must not write anything"
    assert {k: o["metadata"]["resourceVersion"] for k, o in double.objects.items()} == before


def test_native_gang_where_the_pod_group_api_is_not_served_fails_before_anything_is_made(double):
    """An API server without the GenericWorkload gate would accept the pods and drop their
    schedulingGroup; the discovery check refuses first, naming the field and the need."""
    from airflow_tfk.core.errors import SpecError

    backend = KubernetesBackend(conn_id=CONN_ID)  # the real render: a PodGroup and its pods
    spec = make_spec(workers=2, gang_scheduling="native")
    mark = double.mark()
    with pytest.raises(SpecError) as err:
        backend.create(spec)
    assert err.value.field == "gang_scheduling"
    assert all(w in str(err.value) for w in ("1.37", "GenericWorkload", "scheduling.k8s.io/v1beta1=true"))
    # one discovery request, no apply
    assert [(r.method, r.path) for r in double.requests[mark:]] == [
        ("GET", "/apis/scheduling.k8s.io/v1beta1")
    ]
    assert labelled(double, ClusterRef(spec.name, "default")) == []


def test_failed_apply_deletes_what_this_call_created_and_raises(double, backend):
    spec = make_spec(workers=2)
    double.inject("PATCH", rf"/jobs/{spec.name}-worker$", 422)
    with pytest.raises(KubernetesApiError) as err:
        backend.create(spec)
    assert err.value.status == 422 and "Job" in str(err.value)
    assert labelled(double, ClusterRef(spec.name, "default")) == []

    # Objects that existed before the call are not this call's to delete.
    ref = backend.create(spec)
    existing = labelled(double, ref)
    double.inject("PATCH", rf"/jobs/{spec.name}-worker$", 422)
    with pytest.raises(KubernetesApiError):
        backend.create(spec)
    assert labelled(double, ref) == existing


def test_a_cluster_the_platform_policy_refuses_sends_no_request(double):
    """With the deployment's policy bound (the operators do it), every violation of the
    spec's own settings and of the rendered pods is raised, named, before any request."""
    from airflow_tfk.core.errors import SpecErrors
    from airflow_tfk.spec.platform_policy import Level, PlatformPolicy

    backend = KubernetesBackend(conn_id=CONN_ID)  # the real render
    backend.policy = PlatformPolicy()
    bad = {"sidecars": [{"name": "a", "image": "a:1", "securityContext": {"privileged": True}}]}
    spec = TFClusterSpec.from_dict(
        {
            "name": "tfk-policy",
            "image": "tf:2",
            "command": ["python", "t.py"],
            "mode": "all_reduce",
            "worker": {"replicas": 2},
            "pod": bad,
            "namespace_per_training": True,
        }
    )
    mark = double.mark()
    with pytest.raises(SpecErrors) as err:
        backend.create(spec)
    fields = [e.field for e in err.value.errors]
    assert "pod.sidecars[0].securityContext.privileged" in fields, fields
    assert len(fields) == len(set(fields)) and not any("initContainers" in f for f in fields), fields
    assert "[platform policy: pod-security/privileged]" in str(err.value)
    with pytest.raises(SpecErrors):
        backend.preflight(spec)
    assert double.count(since=mark) == 0

    # The same cluster under a privileged policy: created, its namespace enforcing that level.
    backend.policy = PlatformPolicy(pod_security_level=Level.PRIVILEGED)
    ref = backend.create(spec)
    labels = [
        o["metadata"].get("labels", {}) for k, o in double.objects.items() if o.get("kind") == "Namespace"
    ]
    assert any(ls.get("pod-security.kubernetes.io/enforce") == "privileged" for ls in labels), labels
    backend.delete(ref)


def test_manifest_without_the_cluster_label_is_refused_before_anything_is_created(double):
    backend = KubernetesBackend(conn_id=CONN_ID)
    spec = make_spec()

    def unlabelled(spec, identity=None):
        out = hand_rendered(spec)
        del out[-1]["metadata"]["labels"][SEL]
        return out

    backend._render = unlabelled  # type: ignore[method-assign]
    mark = double.mark()
    with pytest.raises(ValueError, match="lacks the label"):
        backend.create(spec)
    assert double.count(since=mark) == 0


# -- status and failure reasons ---------------------------------------------------------
def _fail_worker0(double, name, how):
    pod = double.pod_name(name, "worker", 0)
    how(double, pod)


FAILURES = {
    "exit-code": (lambda d, p: d.set_failed(p, 3, "boom"), "ExitCode", 3),
    "oom-killed": (lambda d, p: d.set_oom_killed(p), "OOMKilled", 137),
    "image-pull-backoff": (
        lambda d, p: d.set_waiting(p, "ImagePullBackOff", "back-off pulling", ago=200),
        "ImagePullBackOff",
        None,
    ),
    "err-image-pull": (lambda d, p: d.set_waiting(p, "ErrImagePull", ago=200), "ErrImagePull", None),
    "invalid-image-name": (lambda d, p: d.set_waiting(p, "InvalidImageName"), "InvalidImageName", None),
    "create-container-config-error": (
        lambda d, p: d.set_waiting(p, "CreateContainerConfigError", 'secret "x" not found'),
        "CreateContainerConfigError",
        None,
    ),
    "crash-loop": (lambda d, p: d.set_waiting(p, "CrashLoopBackOff", last_exit=2), "CrashLoopBackOff", 2),
    "unschedulable": (lambda d, p: d.set_unschedulable(p, ago=400), "Unschedulable", None),
}


def watch(
    backend: KubernetesBackend, ref, until=lambda status: False, timeout: float = 10.0
) -> list[ClusterStatus]:
    """The statuses a wait's watcher yields, until ``until(status)`` holds or ``timeout``
    passes without one."""

    async def collect() -> list[ClusterStatus]:
        seen: list[ClusterStatus] = []
        async with backend.watcher(ref) as watcher:
            end = time.monotonic() + timeout
            while (status := await watcher.next(max(0.0, end - time.monotonic()))) is not None:
                seen.append(status)
                if until(status):
                    break
        return seen

    return asyncio.run(collect())


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_status_and_watch_name_each_failure_reason(double, backend, case):
    how, reason, exit_code = FAILURES[case]
    spec = make_spec(workers=2)
    ref = backend.create(spec)
    _fail_worker0(double, spec.name, how)
    for status in (backend.status(ref), watch(make_backend(), ref, until=bool, timeout=1)[0]):
        t = task(status, "worker", 0)
        assert (t.phase, t.reason, t.exit_code) == (Phase.FAILED, reason, exit_code), t
        assert task(status, "worker", 1).phase is Phase.PENDING
    if case == "unschedulable":
        assert "Insufficient nvidia.com/gpu" in t.message


def test_timeouts_are_not_failures_before_they_expire(double, backend):
    spec = make_spec(workers=2)
    ref = backend.create(spec)
    double.set_waiting(double.pod_name(spec.name, "worker", 0), "ImagePullBackOff", ago=10)
    double.set_unschedulable(double.pod_name(spec.name, "worker", 1), ago=10)
    status = backend.status(ref)
    assert [(t.phase, t.reason) for t in status.of_role("worker")] == [
        (Phase.PENDING, "ImagePullBackOff"),
        (Phase.PENDING, "Unschedulable"),
    ]


def test_watch_turns_an_unschedulable_task_failed_when_its_timeout_passes(double):
    backend = make_backend(unschedulable_timeout=1.5)
    spec = make_spec(workers=1)
    ref = backend.create(spec)
    double.set_unschedulable(double.pod_name(spec.name, "worker", 0))
    seen = watch(backend, ref, until=lambda s: task(s, "worker", 0).phase is Phase.FAILED, timeout=6)
    assert [task(s, "worker", 0).phase for s in seen] == [Phase.PENDING, Phase.FAILED]


def test_task_missing_after_its_job_is_deleted_is_failed_deleted(double, backend):
    spec = make_spec(workers=2, evaluator=RoleSpec(replicas=1))  # the evaluator's Job stays
    ref = backend.create(spec)
    for i in range(2):
        double.set_running(double.pod_name(spec.name, "worker", i))
    assert task(backend.status(ref), "worker", 1).phase is Phase.RUNNING
    double._remove("jobs", "default", f"{spec.name}-worker", "Background")  # kubectl delete job
    status = backend.status(ref)
    assert [(t.phase, t.reason) for t in status.of_role("worker")] == [(Phase.FAILED, "Deleted")] * 2
    assert status.exists


def test_retries_per_index_are_respected(double, backend):
    spec = make_spec(workers=3, retries=2)
    ref = backend.create(spec)
    # worker 0: a retryable exit code, three times; the third failure exhausts 2 retries.
    pod = double.pod_name(spec.name, "worker", 0)
    for attempt in (1, 2):
        double.set_failed(pod, 3)
        t = task(backend.status(ref), "worker", 0)
        assert (t.phase, t.reason, t.restarts) == (Phase.PENDING, "Retrying", attempt), t
        pod = double.retry_index(pod)
        double.set_running(pod)
        assert task(backend.status(ref), "worker", 0).phase is Phase.RUNNING
    double.set_failed(pod, 3)
    t = task(backend.status(ref), "worker", 0)
    assert (t.phase, t.reason, t.exit_code, t.restarts) == (Phase.FAILED, "ExitCode", 3, 3)
    # worker 1: a permanent exit code fails the index at once (podFailurePolicy FailIndex).
    double.set_failed(double.pod_name(spec.name, "worker", 1), 127)
    t = task(backend.status(ref), "worker", 1)
    assert (t.phase, t.exit_code) == (Phase.FAILED, 127)
    # worker 2: a disruption (preemption) is retried without counting.
    double.set_terminated(
        double.pod_name(spec.name, "worker", 2),
        143,
        "Error",
        conditions=[{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}],
    )
    t = task(backend.status(ref), "worker", 2)
    assert (t.phase, t.reason) == (Phase.PENDING, "Retrying")
    assert "not counted" in t.message


def test_no_retries_means_the_first_failure_is_final(double, backend):
    spec = make_spec(workers=1, retries=0)
    ref = backend.create(spec)
    double.set_failed(double.pod_name(spec.name, "worker", 0), 3)
    assert task(backend.status(ref), "worker", 0).phase is Phase.FAILED


# -- logs ---------------------------------------------------------------------------------
def test_logs_of_the_newest_pod_of_a_task(double, backend):
    spec = make_spec(workers=2, retries=1)
    ref = backend.create(spec)
    assert backend.logs(ref, "worker", 0) == ""  # still ContainerCreating: 400 -> ''
    first = double.pod_name(spec.name, "worker", 0)
    double.set_log(first, "old\n")
    double.set_failed(first, 3)
    second = double.retry_index(first)
    double.set_running(second)
    double.set_log(second, "a\nb\nc\n")
    assert backend.logs(ref, "worker", 0, tail_lines=2) == "b\nc\n"
    assert backend.logs(ref, "worker", 0) == "a\nb\nc\n"
    assert backend.logs(ref, "worker", 7) == ""


def test_task_activity_is_the_kubelet_time_of_the_newest_log_line(double, backend):
    """What a stall verdict asks of each running task: one log line with its timestamp."""
    spec = make_spec(workers=2)
    ref = backend.create(spec)
    assert backend.task_activity(ref, "worker", 0).last_output is None  # not started: no line
    pod = double.pod_name(spec.name, "worker", 0)
    double.set_running(pod)
    double.set_log(pod, "step 1\nstep 2\n", at=1_795_632_017.25)
    activity = backend.task_activity(ref, "worker", 0)
    assert activity.last_output == pytest.approx(1_795_632_017.25, abs=1e-3) and activity.note == ""
    assert backend.logs(ref, "worker", 0) == "step 1\nstep 2\n"  # logs stay without timestamps


# -- delete -------------------------------------------------------------------------------
def test_delete_leaves_nothing_with_the_cluster_label_and_is_idempotent(double, backend):
    spec = make_spec(workers=3)
    ref = backend.create(spec)
    for i in range(3):
        double.set_running(double.pod_name(spec.name, "worker", i))
    other = backend.create(make_spec(workers=1))
    assert backend.exists(ref)
    backend.delete(ref)
    assert labelled(double, ref) == []
    assert not backend.exists(ref)
    assert backend.status(ref) == ClusterStatus(tasks=(), exists=False)
    backend.delete(ref)  # nothing left: still fine
    assert labelled(double, other), "another cluster's objects must survive"


def test_delete_reason_is_reported_once_the_cluster_is_gone(double, backend):
    spec = make_spec(workers=2)
    ref = backend.create(spec)
    watcher = make_backend()
    seen: list[ClusterStatus] = []

    def wait() -> None:
        seen.extend(watch(watcher, ref, until=lambda s: not s.exists))

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.5)
    backend.delete(ref, reason="killed by run scheduled__2026-01-02 (kill_previous)")
    thread.join()
    assert seen[-1] == ClusterStatus(
        tasks=(), exists=False, deleted_reason="killed by run scheduled__2026-01-02 (kill_previous)"
    )
    status = make_backend().status(ref)
    assert not status.exists and status.deleted_reason.startswith("killed by run")
    assert labelled(double, ref) == []


def test_find_returns_the_live_clusters_of_a_dag_task(double, backend):
    runs = [RunIdentity("find_dag", "train", f"run{i}") for i in range(3)]
    refs = [backend.create(make_spec(workers=1), run) for run in runs]
    backend.create(make_spec(workers=1), RunIdentity("find_dag", "other", "run0"))
    labels = {k: v for k, v in runs[0].labels().items() if k in (naming.LABEL_DAG, naming.LABEL_TASK)}
    assert sorted(backend.find("default", labels), key=str) == sorted(refs, key=str)
    assert sorted(backend.find(None, labels), key=str) == sorted(refs, key=str)
    assert backend.find("elsewhere", labels) == []
    backend.delete(refs[0])
    assert sorted(backend.find(None, labels), key=str) == sorted(refs[1:], key=str)


# -- request budget -----------------------------------------------------------------------
def test_waiting_on_600_workers_costs_a_handful_of_requests(double, backend):
    spec = make_spec(workers=600)
    ref = backend.create(spec)
    pods = [double.pod_name(spec.name, "worker", i) for i in range(600)]
    for pod in pods:
        double.set_running(pod)

    def cluster_runs() -> None:
        time.sleep(0.3)
        for pod in pods[:300]:
            double.set_succeeded(pod)

    mark = double.mark()
    started = time.monotonic()
    runner = threading.Thread(target=cluster_runs)
    runner.start()
    seen = watch(
        backend, ref, until=lambda s: sum(t.phase is Phase.SUCCEEDED for t in s.of_role("worker")) == 300
    )
    runner.join()
    elapsed = time.monotonic() - started
    counts = double.summary(since=mark)
    print(f"\nwatch of 600 workers for {elapsed:.1f}s: {counts}, {len(seen)} statuses yielded")
    # The Jobs' status counts the pods: one Job list and one Job watch, however many
    # workers (pods not ready are read a page at a time: test_k8s_watch.py). A Job whose
    # counts lag its pods for a moment looks short of pods: its Events are read then, one
    # request at growing gaps, whatever the number of workers (test_k8s_refusal.py).
    assert counts.pop("list events", 0) <= 3, counts
    assert counts == {"list jobs": 1, "watch jobs": 1}, counts
    final = seen[-1]
    assert sum(t.phase is Phase.SUCCEEDED for t in final.of_role("worker")) == 300
    assert sum(t.phase is Phase.RUNNING for t in final.of_role("worker")) == 300

    mark = double.mark()
    for _ in range(5):
        backend.status(ref)
    counts = double.summary(since=mark)
    print(f"5 x status(): {counts}")
    assert counts == {"list pods": 5 * math.ceil(600 / LIST_PAGE)}, counts


def test_watch_relists_after_410_gone(double, backend):
    spec = make_spec(workers=2)
    ref = backend.create(spec)
    mark = double.mark()
    first = True

    def until(status: ClusterStatus) -> bool:
        nonlocal first
        if first:  # listed; the watch from this resourceVersion will be too old
            first = False
            double.compact()
            threading.Timer(0.5, double.set_running, (double.pod_name(spec.name, "worker", 1),)).start()
        return task(status, "worker", 1).phase is Phase.RUNNING

    statuses = watch(backend, ref, until=until, timeout=6)
    assert task(statuses[-1], "worker", 1).phase is Phase.RUNNING
    counts = double.summary(since=mark)
    assert counts.pop("list pods", 0) <= 2, counts  # the pods not ready yet, by page
    assert counts == {"list jobs": 2, "watch jobs": 2}, counts


# -- retries of transient API errors --------------------------------------------------------
def test_429_is_retried_after_retry_after(double, backend):
    ref = backend.create(make_spec(workers=1))
    backend.status(ref)
    double.inject("GET", r"/pods$", 429, retry_after="1")
    mark = double.mark()
    started = time.monotonic()
    backend.status(ref)
    assert time.monotonic() - started >= 0.9
    assert double.count("list", "pods", since=mark) == 2


def test_500_is_retried_and_the_retries_are_bounded(double, backend):
    ref = backend.create(make_spec(workers=1))
    backend.status(ref)
    double.inject("GET", r"/pods$", 500, times=2)
    mark = double.mark()
    backend.status(ref)
    assert double.count("list", "pods", since=mark) == 3
    double.inject("GET", r"/pods$", 503, times=_k8s_retry.ATTEMPTS)
    mark = double.mark()
    with pytest.raises(KubernetesApiError) as err:
        backend.status(ref)
    assert err.value.status == 503
    assert double.count("list", "pods", since=mark) == _k8s_retry.ATTEMPTS


def test_apply_conflict_is_retried_but_client_errors_are_not(double, backend):
    spec = make_spec(workers=1)
    double.inject("PATCH", rf"/services/{spec.name}-worker$", 409)
    ref = backend.create(spec)
    assert double.get("services", f"{spec.name}-worker")
    double.inject("GET", r"/pods$", 403)
    mark = double.mark()
    with pytest.raises(KubernetesApiError) as err:
        backend.status(ref)
    assert err.value.status == 403 and double.count(since=mark) == 1


def test_retry_decorator_async_and_not_found():
    from kubernetes_asyncio.client.exceptions import ApiException

    calls = []

    @_k8s_retry.retry_transient
    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            exc = ApiException(status=429, reason="Too Many Requests")
            exc.headers = {"Retry-After": "0"}
            raise exc
        return "ok"

    assert asyncio.run(flaky()) == "ok" and len(calls) == 3

    @_k8s_retry.retry_transient
    def missing() -> None:
        calls.append(2)
        raise ApiException(status=404, reason="Not Found")

    with pytest.raises(ApiException):
        missing()
    assert calls.count(2) == 1


# -- async: the deferrable trigger's path -----------------------------------------------------


def test_the_watcher_fills_the_job_cache_of_status(double, backend):
    """After a wait's watch, a blocking status reads the Jobs from the cache (one pod
    list, no Job list)."""
    spec = make_spec(workers=2)
    ref = backend.create(spec)
    backend._forget(ref)
    watch(backend, ref, until=bool, timeout=5)
    mark = double.mark()
    backend.status(ref)
    assert double.summary(since=mark) == {"list pods": 1}
    backend.delete(ref)


def test_one_watch_serves_the_whole_wait(double, backend):
    """A wait that sees no change for longer than a watch request lasts keeps its session:
    the next request starts from the resourceVersion, with no new Job or pod list, and
    its progress reads list the task's pod once, not at every read. Every pod is ready:
    the wait reads no pod list of its own."""
    from airflow_tfk.backends.kubernetes import watch as _k8s_watch

    spec = make_spec(workers=2)
    ref = backend.create(spec)
    for i in range(2):
        double.set_running(double.pod_name(spec.name, "worker", i))

    async def wait_quietly() -> None:
        async with backend.watcher(ref) as watcher:
            assert await watcher.next(5) is not None
            for _ in range(3):  # each watch request ends after a second
                assert await watcher.next(1.5) is None
                await watcher.logs("worker", 0, tail_lines=5)

    mark = double.mark()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_k8s_watch, "MAX_WATCH_SECONDS", 1)
        asyncio.run(wait_quietly())
    counts = double.summary(since=mark)
    assert counts["list jobs"] == 1 and counts["list pods"] == 1, counts  # the log's pod
    assert counts["watch jobs"] >= 3 and "watch pods" not in counts, counts
    backend.delete(ref)


def test_a_healthy_wait_reads_no_pod(double, backend):
    """Every pod ready, then every worker done: the wait follows the Jobs' status alone,
    without a pod list or a pod watch."""
    spec = make_spec(workers=3)
    ref = backend.create(spec)
    pods = [double.pod_name(spec.name, "worker", i) for i in range(3)]
    for name in pods:
        double.set_running(name)
    mark = double.mark()

    def until(status: ClusterStatus) -> bool:
        if status is seen_first.setdefault("status", status):  # the wait is on: finish
            threading.Timer(0.1, lambda: [double.set_succeeded(name) for name in pods]).start()
        return status.count("worker", Phase.SUCCEEDED) == 3

    seen_first: dict[str, ClusterStatus] = {}
    seen = watch(backend, ref, until=until, timeout=10)
    assert seen[0].count("worker", Phase.RUNNING) == 3, seen[0]
    assert seen[-1].count("worker", Phase.SUCCEEDED) == 3, seen[-1]
    counts = double.summary(since=mark)
    assert counts == {"list jobs": 1, "watch jobs": 1}, counts
    backend.delete(ref)


def test_a_failed_pod_speaks_for_its_task_in_the_wait(double, backend):
    """A worker fails while the wait watches the Jobs: the first status that shows it
    not running already carries the pod's own reason and exit code (its failed pods are
    read before), and that read is the one pod list of the wait."""
    spec = make_spec(workers=2)
    ref = backend.create(spec)
    for i in range(2):
        double.set_running(double.pod_name(spec.name, "worker", i))
    victim = double.pod_name(spec.name, "worker", 1)
    mark = double.mark()

    def until(status: ClusterStatus) -> bool:
        if status is first.setdefault("status", status):  # the wait is on: fail the worker
            threading.Timer(0.1, double.set_failed, (victim, 3, "boom")).start()
        return task(status, "worker", 1).phase is not Phase.RUNNING

    first: dict[str, ClusterStatus] = {}
    seen = watch(backend, ref, until=until, timeout=10)
    t = task(seen[-1], "worker", 1)
    assert (t.phase, t.reason, t.exit_code) == (Phase.FAILED, "ExitCode", 3), t
    assert double.summary(since=mark).get("list pods") == 1, double.summary(since=mark)
    backend.delete(ref)


# -- configuration and import cost ------------------------------------------------------------
def test_config_rebuilds_an_equivalent_backend():
    backend = KubernetesBackend(conn_id="x", cluster_context="ctx", unschedulable_timeout=60)
    config = backend.config()
    assert config == {
        "conn_id": "x",
        "cluster_context": "ctx",
        "config_file": None,
        "in_cluster": None,
        "unschedulable_timeout": 60,
        "image_pull_timeout": 120,
        "field_manager": "airflow-tfk",
    }
    again = get_backend("kubernetes", **config)
    assert isinstance(again, KubernetesBackend) and again.config() == config


def test_importing_the_backend_loads_no_kubernetes_client():
    probe = (
        "import sys, airflow_tfk.backends.kubernetes.backend; "
        "print(sorted(m for m in ('kubernetes', 'kubernetes_asyncio', "
        "'airflow.providers.cncf.kubernetes.hooks.kubernetes', 'airflow_tfk.render.manifests') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
