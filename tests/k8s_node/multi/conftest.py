"""Session fixtures of the multi-node tests: one control plane and two real nodes
(cluster.py), each node with its own network namespace, pod subnet, kube-proxy and
kube-router's network-policy controller.

The fixture ``k8s_nodes2`` also stands in for the parent package's ``k8s_node`` here, so
``node_ns``, ``node_conn`` and ``local_volumes`` work unchanged on the two nodes. This
directory sorts before the parent's test modules, so the single node is not up while the
two nodes run (two cores). All four tests run with the tier, in CI too: the Service and
NetworkPolicy tests take seconds each, the spread training about 10-25 s and serving under
load 1-4 min. The binaries are built after collection (../conftest.py).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from k8s_node import cluster as clustermod
from k8s_node import node as nodemod
from k8s_node.conftest import _BUILD_ERROR, _storage_class
from tests.helpers import terminal_log


@pytest.fixture(scope="package")
def k8s_nodes2(request: pytest.FixtureRequest) -> Iterator[clustermod.Cluster]:
    log = terminal_log(request.config)
    missing = nodemod.missing_prerequisites()
    if missing:
        pytest.skip("real-node tier: this machine lacks " + "; ".join(missing))
    if _BUILD_ERROR in request.config.stash:
        pytest.fail(request.config.stash[_BUILD_ERROR], pytrace=False)
    failed_before = request.session.testsfailed

    # As for the single node (../conftest.py): the first INT or TERM interrupts the run so
    # the tear-down below runs, and nothing interrupts the tear-down itself.
    def _interrupt(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, _interrupt), signal.signal(signal.SIGINT, _interrupt)
    try:
        cluster = clustermod.Cluster.start(2, log=log, policy=True)
    except BaseException:
        signal.signal(signal.SIGTERM, old[0])
        signal.signal(signal.SIGINT, old[1])
        raise
    try:
        _storage_class(cluster)  # type: ignore[arg-type]
        yield cluster
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        t0 = time.monotonic()
        try:
            cluster.stop()
            keep = request.session.testsfailed > failed_before or bool(os.environ.get("AIRFLOW_TFK_K8S_KEEP"))
            if keep:
                log(f"k8s cluster work directory kept: {cluster.workdir}")
            else:
                cluster.remove()
        finally:
            signal.signal(signal.SIGTERM, old[0])
            signal.signal(signal.SIGINT, old[1])
        log(f"k8s cluster of two nodes torn down in {time.monotonic() - t0:.1f}s")
        # No process, mount, cgroup, network device or directory of any node may outlive it.
        left = cluster.leftovers(removed=not keep)
        assert not left, f"the real nodes left behind: {left}"


@pytest.fixture(scope="package")
def k8s_node(k8s_nodes2: clustermod.Cluster) -> clustermod.Cluster:
    return k8s_nodes2


@pytest.fixture(scope="package")
def node_api(k8s_nodes2: clustermod.Cluster):
    api = k8s_nodes2.api_client()
    yield api
    api.close()
