"""Objects the API server refuses while a cluster is being created: an admission policy
(a ValidatingAdmissionPolicy, as a Kyverno or Gatekeeper rule would) refusing one object
in the middle of the create, and an object-count ResourceQuota too small. The error leads
with the cause and names the object, and every object already created is removed."""

from __future__ import annotations

import pickle
import uuid

import pytest
from kubernetes import client

from airflow_tfk.kube.api import KubernetesApiError
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures


@pytest.fixture
def no_worker_service(k8s_api, tfk_ns):
    """A ValidatingAdmissionPolicy refusing the worker Service in ``tfk_ns``: created after
    the NetworkPolicy and the PS's objects."""
    probe = {"metadata": {"name": "probe-worker"}, "spec": {"ports": [{"port": 1}]}}
    with _tfk.admission_policy(
        k8s_api,
        tfk_ns,
        "services",
        "!object.metadata.name.endsWith('-worker')",
        "worker Services need a cost-center label",
        lambda: client.CoreV1Api(k8s_api).create_namespaced_service(tfk_ns, probe, dry_run="All"),
    ) as name:
        yield name


def _run(tfk_ns: str, **extra):
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, workers=2, ps=1, **extra))
    with pytest.raises(Exception) as err:
        op.execute(ctx)
    return _tfk.cluster_name(ctx), err.value


def test_an_admission_policy_refusing_an_object_mid_create(
    k8s_api, tfk_ns, tfk_conn, no_worker_service
) -> None:
    name, err = _run(tfk_ns)
    assert isinstance(err, KubernetesApiError) and err.status == 422, err
    text = str(err)
    assert text.startswith(
        f"AdmissionDenied: the API server refused Service {name}-worker of cluster {name}: "
        f"ValidatingAdmissionPolicy '{no_worker_service}'"
    ), text
    assert "worker Services need a cost-center label" in text
    assert "objects it had created were removed" in text, text
    assert pickle.loads(pickle.dumps(err)).args == err.args  # crosses a process as it is
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name, timeout=20)


def test_an_object_count_quota_too_small(k8s_api, tfk_ns, tfk_conn) -> None:
    client.CoreV1Api(k8s_api).create_namespaced_resource_quota(
        tfk_ns, {"metadata": {"name": "one-job"}, "spec": {"hard": {"count/jobs.batch": "1"}}}
    )
    _tfk.wait_for(
        "the quota's usage",
        lambda: client.CoreV1Api(k8s_api).read_namespaced_resource_quota("one-job", tfk_ns).status.used,
        20,
    )
    name, err = _run(tfk_ns)
    text = str(err)
    assert text.startswith(f"QuotaExceeded: the API server refused Job {name}-"), text
    assert "exceeded quota: one-job" in text and "were removed" in text, text
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name, timeout=20)
