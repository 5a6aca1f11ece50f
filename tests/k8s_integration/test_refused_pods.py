"""Pods the API server refuses, against the real API server and Job controller: a
ResourceQuota too small, and an admission policy (a ValidatingAdmissionPolicy, CEL, as a
Kyverno or Gatekeeper rule would) that refuses a role's pods. A refused pod never exists,
so only the Job's ``FailedCreate`` Events say why; the training fails naming the cause
(in the exception, the task status and ``airflow-tfk clusters status``) instead of
waiting, silent, for its deadline, and nothing of it is left.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from kubernetes import client

from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.cli.main import main
from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.core.status import Phase
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures


def test_a_quota_too_small_fails_naming_the_quota_and_leaves_nothing(
    k8s_cluster, k8s_api, tfk_ns, tfk_conn, capsys
) -> None:
    client.CoreV1Api(k8s_api).create_namespaced_resource_quota(
        tfk_ns, {"metadata": {"name": "team-pods"}, "spec": {"hard": {"pods": "2"}}}
    )
    _tfk.wait_for(  # the quota controller has counted the namespace
        "the quota's usage",
        lambda: client.CoreV1Api(k8s_api).read_namespaced_resource_quota("team-pods", tfk_ns).status.used,
        20,
    )
    # What a person sees while it waits: the status and the CLI lead with the cause.
    backend = KubernetesBackend(conn_id=tfk_conn)
    ref = backend.create(TFClusterSpec.from_dict({**_tfk.spec(tfk_ns, workers=2, ps=1), "name": "quota-cli"}))
    try:

        def pending_on_quota():
            status = backend.status(ref)
            return status if any(t.reason == "QuotaExceeded" for t in status.tasks) else None

        status = _tfk.wait_for("a task pending on the quota", pending_on_quota, 30)
        # The PS and worker Jobs' controllers race for the 2 pods: the quota leaves out the
        # PS or a worker (or more, while the first pods are still being made).
        refused = [t for t in status.tasks if t.reason == "QuotaExceeded"]
        assert refused and {t.role for t in refused} <= {"ps", "worker"}, status
        for task in refused:
            assert task.phase is Phase.PENDING and "exceeded quota: team-pods" in task.message, task
        argv = ["clusters", "status", "quota-cli", "-n", tfk_ns, "--kubeconfig", str(k8s_cluster.kubeconfig)]
        assert main(argv) == 0
        out = capsys.readouterr().out
        cause = "QuotaExceeded: the API server refused the pod: exceeded quota: team-pods"
        assert re.search(rf"^  (ps-0|worker-[01]) +pending \({cause}", out, re.M), out
    finally:
        backend.delete(ref)

    # The operator: fails once the unschedulable timeout passes, naming the quota.
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, "quota-cli")
    ctx = _tfk.task_context(f"manual__quota_{uuid.uuid4().hex[:6]}")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, workers=2, ps=1), backend_config={"unschedulable_timeout": 3})
    t0 = time.monotonic()
    with pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    assert err.value.reason == "QuotaExceeded", err.value
    cause = "(QuotaExceeded): the API server refused the pod: exceeded quota: team-pods"
    assert str(err.value).startswith(f"task {err.value.task} failed {cause}"), err.value
    assert time.monotonic() - t0 < 30
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


WORKERS_REFUSED = "training workers must run in the batch cluster"


@pytest.fixture
def no_workers_policy(k8s_api, tfk_ns):
    """A ValidatingAdmissionPolicy that refuses the worker pods in ``tfk_ns`` only."""
    probe = {  # within the namespace's restricted Pod Security: only the policy refuses it
        "metadata": {"name": "probe", "labels": {"tfk.airflow.apache.org/role": "worker"}},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "c",
                    "image": _tfk.IMAGE,
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }
    with _tfk.admission_policy(
        k8s_api,
        tfk_ns,
        "pods",
        "object.metadata.?labels['tfk.airflow.apache.org/role'].orValue('') != 'worker'",
        WORKERS_REFUSED,
        lambda: client.CoreV1Api(k8s_api).create_namespaced_pod(tfk_ns, probe, dry_run="All"),
    ) as name:
        yield name


# A bound, so a policy that never takes effect fails the test instead of stalling the suite
# (KWOK's admitted workers would run for ever).
@pytest.mark.timeout(120)
def test_an_admission_policy_refusing_the_workers_fails_at_once_naming_it(
    k8s_api, tfk_ns, tfk_conn, no_workers_policy
) -> None:
    ctx = _tfk.task_context(f"manual__vap_{uuid.uuid4().hex[:6]}")
    name = _tfk.cluster_name(ctx)
    # no timeout to wait out: the same pod template is refused every time
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, workers=2, ps=1))
    t0 = time.monotonic()
    with pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    assert err.value.reason == "AdmissionDenied" and err.value.task.startswith("worker-"), err.value
    assert WORKERS_REFUSED in str(err.value)
    assert no_workers_policy in str(err.value)
    assert time.monotonic() - t0 < 30
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
