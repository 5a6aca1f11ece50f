"""The provider's NetworkPolicy, enforced on two real nodes by kube-router's policy
controller (iptables + ipset in each node's namespace).

The cluster's own NetworkPolicy is the one ``render`` makes for a spec; the "tasks" are
probe servers on the TF port carrying exactly the labels the rendered worker Job gives
its pods, on the second node. From the first node: a pod with a task's labels opens the
TF port; a pod of no training and a worker of another training (its own rendered labels)
do not, while both reach an unprotected server on the same node as the tasks (so the
refusal is the policy's, not the network's).
"""

from __future__ import annotations

import time

import pytest
from kubernetes.utils import create_from_dict

from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_node import _tfk
from k8s_node import cluster as clustermod

from . import _pods

pytestmark = pytest.mark.k8s_node
TF_PORT = 2222


def _rendered(namespace: str, name: str) -> tuple[dict, dict[str, str]]:
    """The NetworkPolicy of a 2-worker training called ``name``, and its workers' labels."""
    data = dict(_tfk.spec(namespace, "all_reduce", workers=2), name=name)
    docs = render(TFClusterSpec.from_dict(data), RunIdentity("dag", "train", f"run-{name}", -1))
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-worker"))
    return policy, dict(job["spec"]["template"]["metadata"]["labels"])


def test_the_tf_port_admits_only_the_clusters_own_pods(k8s_nodes2, node_api, node_ns) -> None:
    t0 = time.monotonic()
    policy, task_labels = _rendered(node_ns, "mine")
    _other_policy, other_labels = _rendered(node_ns, "theirs")
    create_from_dict(node_api, policy, namespace=node_ns)
    first, second = clustermod.node_name(0), clustermod.node_name(1)
    task = _pods.server(node_api, node_ns, second, TF_PORT, task_labels)
    open_server = _pods.server(node_api, node_ns, second, TF_PORT, {"app": "unprotected"})
    task_ip = _pods.ready_ip(node_api, node_ns, task)
    open_ip = _pods.ready_ip(node_api, node_ns, open_server)
    urls = [f"http://{task_ip}:{TF_PORT}/", f"http://{open_ip}:{TF_PORT}/"]
    # Policies reach the nodes' iptables asynchronously: the cluster's own pod is asked
    # last, so a refusal of the others is not just a rule that came late.
    outsider = _pods.fetches(node_api, node_ns, first, urls, 2, labels={"app": "outsider"})
    other = _pods.fetches(node_api, node_ns, first, urls, 2, labels=other_labels)
    # A new pod's address joins the admitted set when the controller has seen the pod, a
    # moment after it starts: the own pod asks every 0.5 s until admitted, and stays so.
    own = _pods.fetches(node_api, node_ns, first, urls[:1], 12, labels=task_labels, pause=0.5)
    for who, got in (("no training", outsider), ("another training", other)):
        to_task = [g for g in got if g["url"] == urls[0]]
        to_open = [g for g in got if g["url"] == urls[1]]
        assert to_task and all("error" in g for g in to_task), (who, to_task)
        assert to_open and all(g.get("answer") == open_server for g in to_open), (who, to_open)
    admitted = next((i for i, g in enumerate(own) if "answer" in g), None)
    assert admitted is not None and admitted <= 8, own
    assert all(g.get("answer") == task for g in own[admitted:]), own
    print(
        f"NetworkPolicy enforced across nodes in {time.monotonic() - t0:.1f}s: "
        f"refused to no training {outsider[0]['error']}, to another training {other[0]['error']}; "
        f"the cluster's own pod admitted after {admitted} refusal(s) 0.5 s apart"
    )
