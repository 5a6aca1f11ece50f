"""kube-proxy on two real nodes: a ClusterIP Service reaches its pods on both nodes.

Two pods behind one Service, one on each node; a client pod calls the Service by its DNS
name (CoreDNS answers with the ClusterIP) and by the ClusterIP itself, a new connection
each time. kube-proxy's iptables rules in the client's node translate the ClusterIP to
either pod, so the answers name both, the other node's pod through the routed subnets.
"""

from __future__ import annotations

import ipaddress
import time

import pytest
from kubernetes import client

from k8s_node import _tfk
from k8s_node import cluster as clustermod

from . import _pods

pytestmark = pytest.mark.k8s_node
PORT = 8080


def test_a_clusterip_service_answers_from_pods_on_both_nodes(k8s_nodes2, node_api, node_ns) -> None:
    t0 = time.monotonic()
    labels = {"app": "echo"}
    first, second = clustermod.node_name(0), clustermod.node_name(1)
    servers = [_pods.server(node_api, node_ns, n, PORT, labels) for n in (first, second)]
    svc = client.CoreV1Api(node_api).create_namespaced_service(
        node_ns,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="echo"),
            spec=client.V1ServiceSpec(
                selector=labels, ports=[client.V1ServicePort(port=80, target_port=PORT, protocol="TCP")]
            ),
        ),
    )
    cluster_ip = svc.spec.cluster_ip
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network("10.96.0.0/16")
    for s in servers:
        _pods.ready_ip(node_api, node_ns, s)
    # kube-proxy writes the endpoints a moment after they are ready: a call before that is
    # refused ("Network is unreachable", kube-proxy's REJECT of a Service without endpoints).
    client_node = k8s_nodes2.nodes[0]
    _tfk.wait_for(
        "kube-proxy on the client's node to have both endpoints",
        lambda: k8s_nodes2.proxied_endpoints(client_node, cluster_ip, 80) == 2,
        60,
    )
    urls = [f"http://echo.{node_ns}.svc/", f"http://{cluster_ip}/"]
    got = _pods.fetches(node_api, node_ns, first, urls, 12)
    for url in urls:
        answers = [g.get("answer") for g in got if g["url"] == url]
        errors = [g["error"] for g in got if g["url"] == url and "error" in g]
        # Every request answered, and by both pods (12 tries: 2 * 0.5**12 that one is missed).
        assert not errors, (url, errors)
        assert set(answers) == set(servers), (url, answers)
    print(f"ClusterIP {cluster_ip}: answers from both nodes' pods, {time.monotonic() - t0:.1f}s")
