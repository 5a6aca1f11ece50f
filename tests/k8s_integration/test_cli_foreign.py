"""`airflow-tfk clusters` and the sweeper never touch what the provider did not make, against the real
API server: objects in the cluster's namespace that carry the cluster's label but are
managed by someone else (a person's data claim, another tool's Service), a namespace of
someone else's that carries a cluster label, and clusters in other namespaces. ``list -A``
does not show them, ``delete`` and the sweep of every namespace leave them as they were."""

from __future__ import annotations

import pytest
from kubernetes import client

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.cli.main import main
from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.orphans import sweep
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

OWNER = RunIdentity("cli_dag", "train", "manual__1", -1)
FOREIGN = {naming.LABEL_CLUSTER: "mine", "app.kubernetes.io/managed-by": "helm"}


def test_foreign_objects_with_a_cluster_label_are_never_touched(
    k8s_cluster, k8s_api, tfk_ns, tfk_conn, capsys, k8s_namespace
) -> None:
    core = client.CoreV1Api(k8s_api)
    other_ns = f"{tfk_ns}-theirs"
    core.create_namespace(
        {"metadata": {"name": other_ns, "labels": {**FOREIGN, naming.LABEL_CLUSTER: "ghost"}}}
    )
    try:
        core.create_namespaced_persistent_volume_claim(
            tfk_ns,
            {
                "metadata": {"name": "team-data", "labels": FOREIGN},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
            },
        )
        core.create_namespaced_service(
            tfk_ns, {"metadata": {"name": "their-svc", "labels": FOREIGN}, "spec": {"ports": [{"port": 80}]}}
        )
        core.create_namespaced_service(  # someone else's, in a namespace the provider never used
            k8s_namespace,
            {
                "metadata": {"name": "ghost-svc", "labels": {**FOREIGN, naming.LABEL_CLUSTER: "ghost"}},
                "spec": {"ports": [{"port": 80}]},
            },
        )
        backend = KubernetesBackend(conn_id=tfk_conn)
        backend.create(TFClusterSpec.from_dict({**_tfk.spec(tfk_ns, workers=1, ps=1), "name": "mine"}), OWNER)
        kubeconfig = ["--kubeconfig", str(k8s_cluster.kubeconfig)]

        assert main(["clusters", "list", "-A", *kubeconfig]) == 0
        listed = capsys.readouterr().out
        assert "ghost" not in listed and "mine" in listed, listed
        owner = ["--dag-id", "cli_dag", "--task-id", "train", "--run-id", "manual__1"]
        assert main(["clusters", "delete", "mine", "-n", tfk_ns, *owner, *kubeconfig]) == 0
        assert f"deleted cluster mine in {tfk_ns}" in capsys.readouterr().out
        assert not backend.exists(ClusterRef("mine", tfk_ns))
        # the sweep of every namespace, as `clusters sweep -A` runs it, with no task
        # instance known: every cluster the provider made would be an orphan
        assert sweep(backend, None, lambda identity: None) == []
        # what someone else made is all still there
        assert (
            core.read_namespaced_persistent_volume_claim("team-data", tfk_ns).metadata.deletion_timestamp
            is None
        )
        assert core.read_namespaced_service("their-svc", tfk_ns).metadata.deletion_timestamp is None
        assert core.read_namespaced_service("ghost-svc", k8s_namespace).metadata.deletion_timestamp is None
        assert core.read_namespace(other_ns).status.phase == "Active"
    finally:
        core.delete_namespace(other_ns)
