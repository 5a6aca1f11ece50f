"""Session fixtures of the real-node tier: the control plane of tests/k8s plus one real
kubelet node (containerd, runc, CNI bridge, CoreDNS) in private namespaces (node.py).

Every test module sets ``pytestmark = pytest.mark.k8s_node``. The binaries are built (once,
cached outside the repository) right after collection, outside every test's timeout. The
tier skips, naming what is missing, only when the machine lacks root, unshare/nsenter/ip,
Debian's apt-get/dpkg or cgroups. Tests marked ``training_image`` also need the real image
of images/training/Dockerfile: its build (training_image.py) starts in the background
right after collection, only when such a test is selected, and is joined before that test
starts, outside its timeout. Environment:

- ``AIRFLOW_TFK_K8S_KEEP=1``: keep the work directory (logs of every component and pod).
  It is kept, and its path printed, when a test failed.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from k8s_node import node as nodemod
from k8s_node import training_image as imagemod
from tests.helpers import build_before_tests, terminal_log

STORAGE_CLASS = "tfk-local"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "k8s_node: needs a real Kubernetes node (tests/k8s_node; built on first use)"
    )
    config.addinivalue_line(
        "markers",
        "training_image: needs images/training/Dockerfile built for real (images/training/build.sh)",
    )


_BUILD_ERROR = pytest.StashKey[str]()
_MISSING = pytest.StashKey[list[str]]()
_IMAGE_BUILD = pytest.StashKey[imagemod.Build]()
_NODE_IMPORT = pytest.StashKey[imagemod.NodeImport]()


@pytest.hookimpl(tryfirst=True)  # the image build then overlaps the other builds too
def pytest_collection_finish(session: pytest.Session) -> None:
    """Build before the first test starts, so a cold build is not charged to its timeout."""
    if session.config.option.collectonly or not any(i.get_closest_marker("k8s_node") for i in session.items):
        return
    missing = nodemod.missing_prerequisites()
    session.config.stash[_MISSING] = missing
    if missing:
        return
    if any(i.get_closest_marker("training_image") for i in session.items):
        session.config.stash[_IMAGE_BUILD] = imagemod.Build()
    multi = any("k8s_node/multi/" in i.nodeid for i in session.items)
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="tfk-kube-router-build")
    router = None
    try:
        if multi:
            from k8s_node import cluster as clustermod

            # kube-router shares almost no Go package with the Kubernetes builds and locks a
            # cache directory of its own, so it compiles beside them (at nice 19, -p 1: in
            # what they leave idle) instead of after them.
            router = pool.submit(
                build_before_tests, session.config, "kube-router", clustermod.ensure_policy_built
            )
        build_before_tests(session.config, "k8s control plane", nodemod.harness.ensure_built)
        build_before_tests(session.config, "k8s node", nodemod.ensure_built)
        if multi:
            # After the kubelet (the same lock): kube-proxy then finds every package it
            # shares with the kubelet in the Go build cache.
            build_before_tests(session.config, "k8s nodes (kube-proxy, iptables)", clustermod.ensure_built)
        if router is not None:
            router.result()
    except (nodemod.NodeError, nodemod.harness.ControlPlaneError) as e:
        session.config.stash[_BUILD_ERROR] = str(e)
    finally:
        pool.shutdown(wait=True)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """Join the image build before a test that needs it starts: this wrapper is outside
    pytest-timeout's, so the wait is not charged to the test's timeout."""
    build = item.config.stash.get(_IMAGE_BUILD, None)
    if build is not None and build.result is None and item.get_closest_marker("training_image"):
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        t0 = time.monotonic()
        try:
            image = build.wait()
            msg = f"training image ready after {image.build_seconds:.0f}s: {image.archive}"
        except imagemod.ImageBuildError as e:  # reported by the fixture, as the test's failure
            msg = f"training image build failed ({str(e).splitlines()[0]})"
        if reporter is not None:
            reporter.write_line(f"{msg}; waited {time.monotonic() - t0:.0f}s before {item.name}")
    yield


def pytest_sessionfinish(session: pytest.Session) -> None:
    build = session.config.stash.get(_IMAGE_BUILD, None)
    if build is not None:
        build.stop()  # a no-op once it ended; else (no test waited for it) stopped as a whole


@pytest.fixture(scope="session")
def training_image(request: pytest.FixtureRequest) -> imagemod.TrainingImage:
    """The built image (its ``docker save`` archive, reference and ID): skips, naming what
    is missing, where the machine cannot build it; fails with the build's log otherwise."""
    missing = request.config.stash.get(_MISSING, None)
    if missing:
        pytest.skip("real-node tier: this machine lacks " + "; ".join(missing))
    build = request.config.stash.get(_IMAGE_BUILD, None)
    if build is None:  # e.g. selected without the marker's hook having seen it
        build = request.config.stash[_IMAGE_BUILD] = imagemod.Build()
    try:
        return build.wait()
    except imagemod.ImageBuildError as e:
        if e.missing:
            pytest.skip(f"training image: {e}")
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="package")
def k8s_node(request: pytest.FixtureRequest) -> Iterator[nodemod.Node]:
    log = terminal_log(request.config)
    missing = request.config.stash.get(_MISSING, None)
    if missing is None:
        missing = nodemod.missing_prerequisites()
    if missing:
        pytest.skip("real-node tier: this machine lacks " + "; ".join(missing))
    if _BUILD_ERROR in request.config.stash:
        pytest.fail(request.config.stash[_BUILD_ERROR], pytrace=False)
    failed_before = request.session.testsfailed

    # A SIGTERM (CI's timeout, a killed job) interrupts the run like Ctrl-C, so the
    # tear-down below still runs; after a SIGKILL the processes still die (PR_SET_PDEATHSIG)
    # but the cgroup directories and the work directory stay. Only the first INT or TERM
    # interrupts: Ctrl-C reaches this lane from the terminal and scripts/test.sh then
    # passes a TERM on, and a second KeyboardInterrupt in the middle of the fixtures'
    # tear-down would skip the rest of it and leave the node's processes, mounts and
    # cgroups behind.
    def _interrupt(signum, frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt(f"signal {signum}")

    old_term = signal.signal(signal.SIGTERM, _interrupt)
    old_int = signal.signal(signal.SIGINT, _interrupt)
    try:
        node = nodemod.Node.start(log=log)
    except BaseException:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
        raise
    importing = None
    try:
        _storage_class(node)
        if _IMAGE_BUILD in request.config.stash:  # a training_image test is selected
            importing = request.config.stash[_NODE_IMPORT] = imagemod.NodeImport(
                node, request.config.stash[_IMAGE_BUILD]
            )
        yield node
    finally:
        # The node's own tear-down runs to its end whatever arrives meanwhile.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        t0 = time.monotonic()
        try:
            if importing is not None:
                importing.close()
            node.stop()
            failed = request.session.testsfailed > failed_before
            keep = failed or bool(os.environ.get("AIRFLOW_TFK_K8S_KEEP"))
            if keep:
                log(f"k8s node work directory kept: {node.workdir}")
            else:
                node.remove()
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
        log(f"k8s node torn down in {time.monotonic() - t0:.1f}s")
        # Nothing of the node may outlive the session: no process, mount, cgroup, veth,
        # directory (the directory only when it was not kept on purpose).
        left = node.leftovers(removed=not keep)
        assert not left, f"the real node left behind: {left}"


@pytest.fixture(scope="module")
def node_training_image(
    request: pytest.FixtureRequest, k8s_node: nodemod.Node, training_image: imagemod.TrainingImage
) -> Iterator[imagemod.TrainingImage]:
    """The training image in the node's containerd: imported in the background since the
    node came up (if the build was done by then), removed after the module (~4 GB of RAM)."""
    importing = request.config.stash.get(_NODE_IMPORT, None) or imagemod.NodeImport(k8s_node, None)
    took, waited = importing.wait(training_image)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"training image imported into the node in {took:.1f}s (waited {waited:.1f}s)")
    yield training_image
    importing.close()
    request.config.stash[_NODE_IMPORT] = imagemod.NodeImport(k8s_node, None)  # a next module imports again
    k8s_node.remove_image(training_image.ref)


@pytest.fixture(scope="package")
def node_api(k8s_node: nodemod.Node):
    api = k8s_node.api_client()
    yield api
    api.close()


def _storage_class(node: nodemod.Node) -> None:
    from kubernetes import client

    api = node.api_client()
    try:
        client.StorageV1Api(api).create_storage_class(
            client.V1StorageClass(
                metadata=client.V1ObjectMeta(name=STORAGE_CLASS),
                provisioner="kubernetes.io/no-provisioner",
                volume_binding_mode="Immediate",
            )
        )
    finally:
        api.close()


@pytest.fixture
def node_ns(node_api) -> Iterator[str]:
    """A fresh namespace enforcing the ``restricted`` Pod Security Standard."""
    from kubernetes import client

    name = f"n-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(node_api)
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            )
        )
    )
    try:
        yield name
    finally:
        core.delete_namespace(name)


class LocalVolumes:
    """PersistentVolumes on the node's disk (hostPath, RWX), each pre-bound to the claim
    a spec will create, so data, logs and models outlive pods and can be read back."""

    def __init__(self, node: nodemod.Node, api) -> None:
        self.node, self.api, self.names = node, api, []

    def provide(self, namespace: str, claim: str, size: str = "1Gi") -> Path:
        from kubernetes import client

        name = f"pv-{uuid.uuid4().hex[:10]}"
        path = self.node.workdir / "pv" / name
        path.mkdir(parents=True)
        path.chmod(0o777)
        client.CoreV1Api(self.api).create_persistent_volume(
            client.V1PersistentVolume(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1PersistentVolumeSpec(
                    capacity={"storage": size},
                    access_modes=["ReadWriteMany"],
                    storage_class_name=STORAGE_CLASS,
                    persistent_volume_reclaim_policy="Retain",
                    host_path=client.V1HostPathVolumeSource(path=str(path), type="Directory"),
                    claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
                ),
            )
        )
        self.names.append(name)
        return path

    def cleanup(self) -> None:
        from kubernetes import client

        for n in self.names:
            try:
                client.CoreV1Api(self.api).delete_persistent_volume(n)
            except client.ApiException as e:
                if e.status != 404:
                    raise


@pytest.fixture
def local_volumes(k8s_node, node_api) -> Iterator[LocalVolumes]:
    v = LocalVolumes(k8s_node, node_api)
    yield v
    v.cleanup()


@pytest.fixture
def node_conn(k8s_node, node_api, node_ns, tmp_path) -> Iterator[str]:
    """The ``kubernetes`` connection the operators use: deploy/rbac's ServiceAccount in the
    test's namespace (a bound token in a kubeconfig), so every test of the tier also shows
    that the least-privilege Role is enough on a real node (a 403 fails the operator)."""

    from k8s_integration._tfk import use_connection
    from kubernetes.utils import create_from_dict

    from tests.helpers import rbac_render

    rbac = rbac_render()  # deploy/rbac/render.py

    for doc in rbac.manifests(node_ns):
        create_from_dict(node_api, doc, namespace=doc["metadata"].get("namespace", node_ns))
    assert k8s_node.cp is not None
    token = k8s_node.cp.service_account_token(node_ns, rbac.SERVICE_ACCOUNT)
    kubeconfig = k8s_node.cp.kubeconfig_for_token(
        tmp_path / "tfk.kubeconfig", token, rbac.SERVICE_ACCOUNT, node_ns
    )
    with use_connection(kubeconfig, "tfk_k8s") as conn_id:
        yield conn_id
