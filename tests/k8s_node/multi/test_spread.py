"""A training spread over two real nodes: its tasks talk pod to pod across the nodes.

Topology spread (``kubernetes.io/hostname``, maxSkew 1, DoNotSchedule) puts each of the two
all_reduce workers on its own node, so the ring all-reduce between them crosses the
fabric: each node's pod subnet is routed to the other's node IP. Two TensorFlow pods, 0.5-3
min; it runs with the real-node tier, in CI too.
"""

from __future__ import annotations

import ipaddress
import time

import pytest

from k8s_node import _tfk
from k8s_node import cluster as clustermod

pytestmark = [pytest.mark.k8s_node]

SPREAD = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}


def test_all_reduce_spread_over_two_nodes_trains(k8s_nodes2, node_api, node_ns, node_conn, capfd) -> None:
    ctx = _tfk.fresh_context()
    name = _tfk.cluster_name(ctx)
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=2,
        args=["--tfk_steps", "40", "--tfk_checkpoint_every", "0"],
        pod={"topology_spread": [SPREAD]},
    )
    t0 = time.monotonic()
    result = _tfk.make_op(spec_data).execute(ctx)
    took = time.monotonic() - t0
    assert result["outcome"] == "succeeded", result
    assert _tfk.progress_lines(capfd.readouterr().out)
    pods = _tfk.pods(node_api, node_ns, name, "worker")
    assert len(pods) == 2
    placed = {p.spec.node_name: p.status.pod_ip for p in pods}
    # One worker per node, each with an address of its own node's subnet.
    assert set(placed) == {clustermod.node_name(0), clustermod.node_name(1)}, placed
    for n in k8s_nodes2.nodes:
        assert ipaddress.ip_address(placed[n.name]) in ipaddress.ip_network(n.pod_subnet), (n.name, placed)
    for p in pods:
        assert p.status.phase == "Succeeded", (p.metadata.name, p.status.phase)
    print(f"all_reduce, 2 workers on 2 nodes ({placed}), 40 steps: {took:.1f}s")
