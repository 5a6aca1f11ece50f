"""The lifecycle's ownership rules on the real local backend (processes, not a double).

A cluster belongs to one task instance: another run of the same task, a different map
index or code outside Airflow may neither reattach to it nor delete it; the same task
instance with another spec replaces it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.errors import ClusterOwnershipError, SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.ending import Remove, RunResult, end_run
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.run.lifecycle import create_or_reattach
from airflow_tfk.spec.admission import Layout
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec
from tests.helpers import local_backend, local_state

pytestmark = pytest.mark.timeout(60)

SLEEPER = ("python", "-c", "import time; time.sleep(60)")
OWNER = RunIdentity("dag", "train", "scheduled__1", -1)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    yield from local_backend(tmp_path / "root", tmp_path, kill_grace_seconds=0.5)


def spec(**kw) -> TFClusterSpec:
    base = dict(
        name="fixed",
        image="local/unused:1",
        command=SLEEPER,
        mode="all_reduce",
        worker=RoleSpec(replicas=1),
    )
    base.update(kw)
    return TFClusterSpec(**base)


@pytest.mark.parametrize(
    "intruder",
    [
        RunIdentity("dag", "train", "scheduled__2", -1),  # another run, same task
        RunIdentity("dag", "train", "scheduled__1", 0),  # another map index
        RunIdentity("other", "train", "scheduled__1", -1),  # another dag
        None,  # code outside Airflow
    ],
)
def test_only_the_owner_reattaches_and_nobody_else_deletes(backend, intruder) -> None:
    s = spec()
    ref = create_or_reattach(backend, s, OWNER, lambda m: None)
    before = local_state(backend, ref)["uid"]

    with pytest.raises(ClusterOwnershipError) as err:
        create_or_reattach(backend, s, intruder, lambda m: None)
    # The error names the field and the owner, and is a SpecError (nothing created).
    assert isinstance(err.value, SpecError) and err.value.field == "name"
    assert "scheduled__1" in str(err.value) and "'dag'" in str(err.value)

    # A handle of the intruder (e.g. its on_kill) must not delete the owner's cluster.
    foreign = ClusterHandle.for_spec(s, backend, intruder)
    said: list[str] = []
    assert end_run(foreign, "killed", remove=Remove.ALL, emit=said.append).owned is False
    assert end_run(foreign, "failed", remove=Remove.KEEP_FAILED, emit=said.append).owned is False
    assert "belongs to dag 'dag'" in said[0] and len(said) == 2
    assert backend.exists(ref) and local_state(backend, ref)["uid"] == before

    # The owner reattaches (same cluster) and may delete it.
    said.clear()
    assert create_or_reattach(backend, s, OWNER, said.append) == ref
    assert "reattaching" in said[0] and local_state(backend, ref)["uid"] == before
    assert end_run(ClusterHandle.for_spec(s, backend, OWNER), "done", emit=said.append).deleted
    assert not backend.exists(ref)


def test_same_owner_with_another_spec_replaces_the_cluster(backend) -> None:
    s = spec()
    ref = create_or_reattach(backend, s, OWNER, lambda m: None)
    first = local_state(backend, ref)["uid"]
    changed = dataclasses.replace(s, worker=RoleSpec(replicas=2))
    said: list[str] = []
    create_or_reattach(backend, changed, OWNER, said.append)
    assert any("created from another spec" in m for m in said), said
    state = local_state(backend, ref)
    assert state["uid"] != first and state["spec_hash"] == changed.fingerprint()
    assert len(state["tasks"]) == 2


def test_fingerprint_is_stable_and_sensitive() -> None:
    a, b = spec(), spec()
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != spec(mode="between_graph", ps=RoleSpec()).fingerprint()
    assert a.fingerprint() != spec(env={"X": "1"}).fingerprint()


def test_handle_round_trip_keeps_the_owner(backend) -> None:
    h = ClusterHandle.for_spec(spec(), backend, OWNER)
    again = ClusterHandle.from_dict(h.to_dict())
    assert again.owner == OWNER and again.owner_known
    by_hand = {k: v for k, v in h.to_dict().items() if k != "owner"}
    assert ClusterHandle.from_dict(by_hand).owner_known is False


def test_handle_round_trip_keeps_the_layout(backend) -> None:
    h = ClusterHandle.for_spec(spec(layout="jobset"), backend, OWNER)
    assert h.layout is Layout.JOBSET
    assert ClusterHandle.from_dict(h.to_dict()).layout is Layout.JOBSET
    legacy = {k: v for k, v in h.to_dict().items() if k != "layout"}  # from before it was kept
    assert ClusterHandle.from_dict(legacy).layout is Layout.JOBS


def test_the_local_backend_stops_the_ps_after_success_in_either_layout(backend) -> None:
    """Only a JobSet ends the PS itself (tests/k8s_integration/test_jobset_controller.py);
    the local backend plays no JobSet controller, so its clean-up stops the PS whatever
    the spec's layout."""
    s = spec(mode="between_graph", ps=RoleSpec(), layout="jobset", ps_grace_seconds=0)
    ref = create_or_reattach(backend, s, OWNER, lambda m: None)
    said: list[str] = []
    handle = ClusterHandle.for_spec(s, backend, OWNER)
    ended = end_run(handle, "succeeded", result=RunResult.ACCEPTED, remove=Remove.LEFTOVERS, emit=said.append)
    assert ended.removed == ("ps",)
    ps = [t for t in backend.status(ref).tasks if t.role == "ps"]
    assert [(t.phase.value, t.reason) for t in ps] == [("Pending", "Deleted")]
    assert f"deleted ps of cluster {s.name}; why: succeeded" in said


def test_retry_after_the_deadline_keeps_a_finished_training(backend) -> None:
    """Issue 10 item 6: the deadline killed the PS after the workers had succeeded; a retry
    must reattach and report success, not retrain (and export a duplicate)."""
    import sys
    import time

    from airflow_tfk.run.policies import Outcome, evaluate, replicas_of

    s = TFClusterSpec(
        name="deadline-retry",
        image="local/unused:1",
        command=(
            sys.executable,
            "-c",
            "import os, time; time.sleep(60 if os.environ['TFK_ROLE'] == 'ps' else 0)",
        ),
        ps=RoleSpec(),
        worker=RoleSpec(replicas=2),
        max_duration_seconds=2,
    )
    ref = create_or_reattach(backend, s, OWNER, lambda m: None)
    uid = local_state(backend, ref)["uid"]
    deadline = time.monotonic() + 30
    while backend.status(ref).task("ps", 0).reason != "DeadlineExceeded":
        assert time.monotonic() < deadline, backend.status(ref).summary()
        time.sleep(0.1)
    said: list[str] = []
    assert create_or_reattach(backend, s, OWNER, said.append) == ref
    assert "reattaching" in said[0] and local_state(backend, ref)["uid"] == uid  # nothing retrained
    assert evaluate(s.mode, replicas_of(s), backend.status(ref)).outcome is Outcome.SUCCEEDED
