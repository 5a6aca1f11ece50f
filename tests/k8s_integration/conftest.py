"""Session fixtures: a real Kubernetes control plane (see tests/k8s/harness.py).

Tests that need it are marked ``k8s`` (every module here sets ``pytestmark``) and take the
``k8s_cluster`` fixture (the running :class:`k8s.harness.ControlPlane`) or ``k8s_api``
(a cluster-admin ``kubernetes.client.ApiClient``) or ``k8s_namespace`` (a fresh namespace,
deleted afterwards).

The binaries are built (once, cached outside the repository) right after collection when
any selected test is marked ``k8s``, outside every test's timeout. Environment:

- ``AIRFLOW_TFK_K8S_KEEP=1``: keep the work directory (logs, kubeconfig) even on success.
  It is always kept, and its path printed, when a test failed.
- ``AIRFLOW_TFK_K8S_NODES``: number of KWOK nodes (default 2).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s import harness

from tests.helpers import build_before_tests, terminal_log


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "k8s: needs the real Kubernetes control plane (tests/k8s; built on first use)"
    )
    config.addinivalue_line(
        "markers",
        "addons(*names): needs these controllers built from their Go modules "
        "(tests/k8s/<name>/build.sh: jobset, kueue), built before the first test",
    )


def _wants_k8s(session: pytest.Session) -> bool:
    return any(item.get_closest_marker("k8s") for item in session.items)


_BUILD_ERROR = pytest.StashKey[str]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build before the first test starts, so a cold build is not charged to its timeout."""
    if session.config.option.collectonly or not _wants_k8s(session):
        return
    try:
        build_before_tests(session.config, "k8s control plane", harness.ensure_built)
    except harness.ControlPlaneError as e:
        # Reported by the fixture, as the failure of every test that needs the cluster.
        session.config.stash[_BUILD_ERROR] = str(e)
        return
    _build_addons(session)


def _build_addons(session: pytest.Session) -> None:
    """The add-on controllers the selected tests need (a cold Go build takes many minutes:
    outside every test's timeout too). A failure here is left for the test's own fixture
    to report, where the same build runs again and fails with its message."""
    from k8s import addons

    wanted: dict[str, None] = {}
    for item in session.items:
        for mark in item.iter_markers("addons"):
            wanted.update(dict.fromkeys(mark.args))
    builders = {"jobset": addons.jobset_binary, "kueue": addons.kueue_binary}
    for name in wanted:
        with contextlib.suppress(addons.AddonError):
            build_before_tests(session.config, f"{name} controller", builders[name])


@pytest.fixture(scope="package")
def k8s_cluster(request: pytest.FixtureRequest) -> Iterator[harness.ControlPlane]:
    log = terminal_log(request.config)
    if _BUILD_ERROR in request.config.stash:
        pytest.fail(request.config.stash[_BUILD_ERROR], pytrace=False)
    workdir = Path(tempfile.mkdtemp(prefix="tfk-k8s-"))
    failed_before = request.session.testsfailed
    cp = harness.ControlPlane.start(
        workdir,
        nodes=int(os.environ.get("AIRFLOW_TFK_K8S_NODES", "2")),
        bin_dir=harness.ensure_built(),
        log=log,
    )
    try:
        yield cp
    finally:
        cp.stop()
        failed = request.session.testsfailed > failed_before
        if failed or os.environ.get("AIRFLOW_TFK_K8S_KEEP"):
            log(f"k8s control plane logs kept in {cp.logs}")
        else:
            cp.remove()


@pytest.fixture(scope="package")
def k8s_api(k8s_cluster: harness.ControlPlane):
    api = k8s_cluster.api_client()
    yield api
    api.close()


@pytest.fixture
def k8s_namespace(k8s_api) -> Iterator[str]:
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(k8s_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)
