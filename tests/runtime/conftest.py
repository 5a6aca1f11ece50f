"""Fixtures of the runtime tests: local TF clusters that are always torn down."""

from __future__ import annotations

import signal

import pytest

from .localcluster import LocalCluster


@pytest.fixture
def local_cluster(tmp_path):
    """``local_cluster(roles, command, mode=..., env=...)`` -> a :class:`LocalCluster`
    whose processes are all killed at teardown (ps serve forever by design)."""
    clusters: list[LocalCluster] = []

    def make(roles, command, mode=None, env=None, name="test") -> LocalCluster:
        c = LocalCluster(tmp_path / f"cluster{len(clusters)}", roles, command, mode=mode, env=env, name=name)
        clusters.append(c)
        return c

    yield make
    for c in clusters:
        c.close()
    leftovers = [(key, p.pid) for c in clusters for key, p in c.procs.items() if p.poll() is None]
    assert not leftovers, f"processes left running: {leftovers}"


@pytest.fixture(autouse=True)
def _no_sigterm_handler_left():
    """A runtime test that runs an app in this process leaves SIGTERM as it found it: a
    notice left installed (its handler and its wakeup fd) would take a later SIGTERM of
    this process for itself and end it with 76 (CI's main lane once ended so)."""
    before = signal.getsignal(signal.SIGTERM)
    fd_before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd_before)
    yield
    after = signal.getsignal(signal.SIGTERM)
    fd_after = signal.set_wakeup_fd(fd_before)
    signal.signal(signal.SIGTERM, before)
    assert (after, fd_after) == (before, fd_before), "SIGTERM's handler or wakeup fd was left changed"
