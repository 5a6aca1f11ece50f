"""Ownership and orphans against the real API server (issue 10 items 1 and 5).

- another run of the same task with a fixed name is refused with the owner's name, and
  its handle (on_kill, a teardown task, its trigger's on_kill) cannot end the owner's
  cluster; kill_previous of another task cannot either;
- the same task instance with another spec replaces the cluster (new Job uid);
- the sweeper deletes the cluster once its task instance is no longer running, and a
  cluster past its deadline (its max-duration annotation): zero labelled objects left.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core.errors import ClusterOwnershipError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.ending import end_run
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.run.lifecycle import create_or_reattach, kill_previous
from airflow_tfk.run.orphans import sweep
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.triggers.cluster import TFClusterDoneTrigger
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

OWNER = RunIdentity("k8s_it", "train", "scheduled__1", -1)
OTHER = RunIdentity("k8s_it", "train", "scheduled__2", -1)


def _job_uid(api, ns: str, name: str) -> str:
    return client.BatchV1Api(api).read_namespaced_job(f"{name}-worker", ns).metadata.uid


def test_takeover_refused_replace_on_new_spec_and_sweeper(k8s_api, tfk_ns, tfk_conn) -> None:
    backend = KubernetesBackend(conn_id=tfk_conn)
    spec = TFClusterSpec.from_dict(
        {**_tfk.spec(tfk_ns, workers=1, ps=1), "name": "owned", "max_duration_seconds": 3600}
    )
    ref = ClusterRef("owned", tfk_ns)
    said: list[str] = []
    create_or_reattach(backend, spec, OWNER, said.append)
    uid = _job_uid(k8s_api, tfk_ns, "owned")
    owner = backend.owner(ref)
    assert owner is not None and owner.identity == OWNER and owner.spec_hash == spec.fingerprint()
    assert owner.max_duration_seconds == 3600 and owner.created_at is not None

    with pytest.raises(ClusterOwnershipError, match="run 'scheduled__1'"):
        create_or_reattach(backend, spec, OTHER, said.append)
    # Every path ends a run through end_run: another task instance's handle (its on_kill,
    # a teardown task) and its deferred trigger's on_kill end nothing, naming the owner.
    said.clear()
    foreign = ClusterHandle.for_spec(spec, backend, OTHER)
    assert end_run(foreign, "killed", emit=said.append).owned is False
    assert "belongs to dag 'k8s_it', task 'train', run 'scheduled__1'" in said[-1], said
    asyncio.run(TFClusterDoneTrigger.for_handle(foreign, progress_interval=1).on_kill())
    # kill_previous ends only earlier runs of its own task: another task's run is refused.
    said.clear()
    kill_previous(
        backend, spec, RunIdentity("k8s_it", "evaluate", "scheduled__3", -1), ref, "newer", said.append
    )
    assert "not killing cluster owned: it belongs to dag 'k8s_it', task 'train'" in said[-1], said
    assert _job_uid(k8s_api, tfk_ns, "owned") == uid  # untouched

    changed = TFClusterSpec.from_dict({**spec.to_dict(), "worker": {"replicas": 2}})
    create_or_reattach(backend, changed, OWNER, said.append)
    assert any("created from another spec" in m for m in said), said
    _tfk.wait_for("the replaced Job", lambda: _job_uid(k8s_api, tfk_ns, "owned") != uid, timeout=60)

    # The owner still runs: kept. Past the deadline: swept, whatever the owner's state.
    assert sweep(backend, tfk_ns, lambda i: "running", dry_run=True) == []
    late = backend.owner(ref).deadline + 1  # type: ignore[union-attr, operator]
    swept = sweep(backend, tfk_ns, lambda i: "running", now=late, dry_run=True)
    assert [r.ref for r in swept] == [ref] and "deadline" in swept[0].reason
    # The owner's task instance failed (its worker was SIGKILLed): deleted.
    swept = sweep(backend, tfk_ns, lambda i: "failed")
    assert [r.ref for r in swept] == [ref]
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, "owned", timeout=90)
