"""The quickstart on Kubernetes: ``airflow dags test tfk_train_publish`` with
TFK_BACKEND=kubernetes and a ``kubernetes`` connection (deploy/rbac's ServiceAccount) to
the real node: TensorBoard over the logs claim, a parameter_server training of real
TensorFlow pods that cleans up, and a publish to the stand-in model server that answers
a smoke predict through the API server's service proxy."""

from __future__ import annotations

import ipaddress
import re
import sys
from pathlib import Path

import pytest
from kubernetes import client

from airflow_tfk.core import naming
from tests.helpers import dags_test, migrated_airflow_home

from . import _tfk
from . import node as nodemod
from .test_serving import _claim

pytestmark = pytest.mark.k8s_node

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_dags_test_train_publish_on_the_real_node(
    k8s_node, node_api, node_ns, node_conn, local_volumes, tmp_path
) -> None:
    env = migrated_airflow_home(tmp_path / "airflow")
    _claim(node_api, node_ns, local_volumes, "tfk-models")
    _claim(node_api, node_ns, local_volumes, "tfk-logs")
    env.update(
        {
            "TFK_BACKEND": "kubernetes",
            "TFK_KUBERNETES_CONN_ID": node_conn,
            "TFK_NAMESPACE": node_ns,
            "TFK_IMAGE": nodemod.TRAIN_IMAGE,
            # The API server's service proxy dials the pods from the CNI bridge (the pod
            # subnet's first address); this control plane publishes no default/kubernetes
            # EndpointSlice to discover it from, as behind konnectivity.
            "TFK_API_SERVER_CIDRS": f"{ipaddress.ip_network(nodemod.POD_SUBNET)[1]}/32",
        }
    )
    run = dags_test(env, "tfk_train_publish", conf={"steps": 60}, timeout=600)
    out = run.stdout + run.stderr
    (tmp_path / "dags-test.log").write_text(out)  # the whole run, for a failure's reader
    assert run.returncode == 0, f"{tmp_path / 'dags-test.log'}\n{out[-6000:]}"
    assert "state=success" in out or "DagRunState.SUCCESS" in out, out[-4000:]
    assert "on the kubernetes backend" in out and "training succeeded" in out, out[-4000:]
    assert _tfk.progress_lines(out), out[-4000:]
    # the smoke predict went through the API server's service proxy (REST or gRPC)
    assert re.search(r"smoke (\w+ )?predict of version \d+ answered", out), out[-4000:]
    # Cleaned up: only the finished chief Job's pod may remain of the training.
    core = client.CoreV1Api(node_api)
    running = [
        p.metadata.name
        for p in core.list_namespaced_pod(node_ns, label_selector=f"{naming.LABEL_ROLE} in (ps,worker)").items
        if p.status.phase == "Running"
    ]
    assert not running, running
