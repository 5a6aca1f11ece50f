"""The pod rules against the real API server: what the spec accepts, the API server admits.

One spec uses every pod field, cluster-wide and per role (tests/spec/test_pods.py's
``EVERY``): affinity and anti-affinity, topology spread, priority and runtime class, a
Secret and a ConfigMap as volumes, as ``envFrom`` and as ``valueFrom``, a ``/dev/shm``
memory volume, a sidecar and an init container, labels and annotations, a ServiceAccount
per role and a pod template patch. In a namespace that enforces the ``restricted`` Pod
Security Standard:

- every rendered object, in both layouts (the Jobs; the JobSet against JobSet's own CRD),
  passes a strict server-side dry run with no warning, so no field is unknown or dropped;
- the Jobs layout is created through the backend, and the pods the Job controller makes
  are admitted (Priority, RuntimeClass, ServiceAccount and PodSecurity admission) and
  carry each setting, read back from the API.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest
from k8s import addons
from kubernetes import client

from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_integration import _tfk
from tests.spec.test_pods import EVERY

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures
IDENTITY = RunIdentity("k8s_it", "pods", "manual__2026-01-01T00:00:00+00:00", -1)


def _every(namespace: str, suffix: str) -> dict[str, Any]:
    data = copy.deepcopy(EVERY)
    data.update(namespace=namespace, image=_tfk.IMAGE, name="podrules", ps_grace_seconds=1)
    data.update(mode="between_graph", ps={"replicas": 1})  # a PS: a role without the worker's rules
    data["pod"]["priority_class"] = f"tfk-high-{suffix}"
    data["pod"]["runtime_class"] = f"tfk-runc-{suffix}"
    data["worker"]["pod"]["priority_class"] = f"tfk-workers-{suffix}"
    return data


@pytest.fixture
def cluster_objects(k8s_api, tfk_ns):
    """The objects the pod rules name: a Secret, a ConfigMap, ServiceAccounts, and the
    cluster-wide PriorityClasses and RuntimeClass (named per test, deleted afterwards)."""
    suffix = uuid.uuid4().hex[:6]
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_secret(
        tfk_ns, {"metadata": {"name": "tfk-test-secret"}, "stringData": {"password": "s3cret", "TOKEN": "t"}}
    )
    core.create_namespaced_config_map(
        tfk_ns, {"metadata": {"name": "tfk-test-config"}, "data": {"mode": "fast"}}
    )
    for sa in ("trainer", "worker-sa"):
        core.create_namespaced_service_account(tfk_ns, {"metadata": {"name": sa}})
    sched = client.SchedulingV1Api(k8s_api)
    node = client.NodeV1Api(k8s_api)
    classes = {f"tfk-high-{suffix}": 1000, f"tfk-workers-{suffix}": 2000}
    for name, value in classes.items():
        sched.create_priority_class({"metadata": {"name": name}, "value": value})
    node.create_runtime_class({"metadata": {"name": f"tfk-runc-{suffix}"}, "handler": "runc"})
    try:
        yield suffix, classes
    finally:
        for name in classes:
            sched.delete_priority_class(name)
        node.delete_runtime_class(f"tfk-runc-{suffix}")


def test_every_pod_field_passes_a_strict_dry_run_in_both_layouts(k8s_api, tfk_ns, cluster_objects):
    addons.install(k8s_api, addons.JOBSET)  # JobSet's CRD: its schema holds the pod template
    suffix, _ = cluster_objects
    for layout in ("jobs", "jobset"):
        spec = TFClusterSpec.from_dict({**_every(tfk_ns, suffix), "layout": layout})
        for manifest in render(spec, IDENTITY):
            status, warning = _tfk.apply_dry_run(k8s_api, manifest, tfk_ns)
            assert status in (200, 201) and not warning, (layout, manifest["kind"], warning)


def test_the_pods_are_admitted_and_carry_every_setting(k8s_api, tfk_ns, tfk_conn, cluster_objects):
    suffix, classes = cluster_objects
    spec = TFClusterSpec.from_dict(_every(tfk_ns, suffix))
    backend = KubernetesBackend(conn_id=tfk_conn)
    core = client.CoreV1Api(k8s_api)
    ref = backend.create(spec, IDENTITY)
    try:
        pods = _tfk.wait_for(
            "both worker pods created (admitted)",
            lambda: (
                (
                    p := core.list_namespaced_pod(
                        tfk_ns, label_selector="tfk.airflow.apache.org/role=worker"
                    ).items
                )
                and len(p) == 2
                and p
            ),
            30,
        )
        pod = pods[0]
        assert pod.spec.priority_class_name == f"tfk-workers-{suffix}"
        assert pod.spec.priority == classes[f"tfk-workers-{suffix}"]  # resolved by Priority admission
        assert pod.spec.runtime_class_name == f"tfk-runc-{suffix}"
        assert pod.spec.service_account_name == "worker-sa"
        assert pod.spec.affinity.pod_anti_affinity is not None
        assert pod.spec.topology_spread_constraints[0].label_selector.match_labels == {
            "tfk.airflow.apache.org/cluster": "podrules",
            "tfk.airflow.apache.org/role": "worker",
        }
        assert pod.metadata.labels["team"] == "ml" and pod.metadata.labels["tier"] == "workers"
        assert pod.metadata.annotations["example.com/role"] == "worker"
        init = {c.name: c for c in pod.spec.init_containers}
        assert list(init) == ["prepare", "agent"] and init["agent"].restart_policy == "Always"
        (main,) = pod.spec.containers
        assert main.name == "tensorflow" and main.working_dir == "/tfk/scratch"  # from the patch
        assert [h.hostnames for h in pod.spec.host_aliases] == [["tfk-patched.example"]]
        refs = {e.name: e.value_from for e in main.env if e.value_from is not None}
        assert refs["DB_PASSWORD"].secret_key_ref.key == "password"
        assert refs["MODE_FROM_CONFIG"].config_map_key_ref.name == "tfk-test-config"
        assert {(f.secret_ref or f.config_map_ref).name for f in main.env_from} == {
            "tfk-test-secret",
            "tfk-test-config",
        }
        volumes = {v.name: v for v in pod.spec.volumes}
        assert volumes["tfk-shm"].empty_dir.medium == "Memory"
        assert volumes["creds"].secret.secret_name == "tfk-test-secret"
        assert {m.mount_path for m in main.volume_mounts} >= {"/dev/shm", "/etc/creds", "/etc/settings"}
        # the PS has the cluster's rules, not the worker's
        (ps,) = _tfk.wait_for(
            "the PS pod",
            lambda: core.list_namespaced_pod(tfk_ns, label_selector="tfk.airflow.apache.org/role=ps").items,
            30,
        )
        assert (
            ps.spec.priority_class_name == f"tfk-high-{suffix}" and ps.spec.service_account_name == "trainer"
        )
        assert not ps.spec.host_aliases
    finally:
        backend.delete(ref)
