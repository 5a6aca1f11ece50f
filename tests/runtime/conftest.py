"""Fixtures of the runtime tests: local TF clusters that are always torn down."""

from __future__ import annotations

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
