"""The orphan sweeper on the real local backend (processes), and its Airflow operator.

Fault: the process waiting on a cluster is SIGKILLed (no on_kill, no teardown); the
cluster runs on; the sweeper, told the task instance failed, deletes it: zero processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.operators.sweeper import TFSweepOrphansOperator, task_state
from airflow_tfk.run.orphans import sweep
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec
from tests.helpers import local_backend, local_state, python_cluster

pytestmark = pytest.mark.timeout(120)

SLEEP = (sys.executable, "-c", "import time; time.sleep(300)")
OWNER = RunIdentity("dag", "train", "scheduled__1", -1)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    yield from local_backend(tmp_path / "root", tmp_path, kill_grace_seconds=0.5)


def spec(name: str, **kw) -> TFClusterSpec:
    return TFClusterSpec(
        name=name, image="local/unused:1", command=SLEEP, ps=RoleSpec(), worker=RoleSpec(), **kw
    )


def states(mapping: dict[str, str | None]):
    return lambda identity: mapping.get(identity.run_id)


def test_sweeps_clusters_of_finished_or_unknown_task_instances_only(backend) -> None:
    refs = {}
    for run, _state in (
        ("running", "running"),
        ("deferred", "deferred"),
        ("retry", "up_for_retry"),
        ("failed", "failed"),
        ("success", "success"),
        ("gone", None),
    ):
        s = spec(f"c-{run}")
        refs[run] = backend.create(s, RunIdentity("dag", "train", run, -1))
    outside = backend.create(spec("c-outside"))  # no Airflow owner
    said: list[str] = []
    run_states = {
        "running": "running",
        "deferred": "deferred",
        "retry": "up_for_retry",
        "failed": "failed",
        "success": "success",
    }
    dry = sweep(backend, "default", states(run_states), dry_run=True, emit=said.append)
    assert sorted(r.ref.name for r in dry) == ["c-failed", "c-gone", "c-success"]
    assert all(backend.exists(r) for r in refs.values())  # a dry run deletes nothing

    swept = sweep(backend, "default", states(run_states), emit=said.append)
    assert sorted(r.ref.name for r in swept) == ["c-failed", "c-gone", "c-success"]
    assert "is gone" in next(r.reason for r in swept if r.ref.name == "c-gone")
    for run in ("failed", "success", "gone"):
        assert not backend.exists(refs[run]) and backend._marked(refs[run]) == []
        assert "orphan sweeper" in backend.status(refs[run]).deleted_reason
    for run in ("running", "deferred", "retry"):
        assert backend.exists(refs[run])
    assert backend.exists(outside)


def test_deadline_is_enforced_on_every_role_whatever_the_owner(backend) -> None:
    s = spec("c-deadline", max_duration_seconds=3600)
    ref = backend.create(s, OWNER)
    assert sweep(backend, "default", states({"scheduled__1": "running"})) == []
    later = time.time() + 3601
    swept = sweep(backend, "default", states({"scheduled__1": "running"}), now=later)
    assert [r.ref for r in swept] == [ref] and "deadline" in swept[0].reason
    assert backend._marked(ref) == []


def test_finished_clusters_of_a_succeeded_task_are_left_to_their_ttl(backend) -> None:
    s = python_cluster(
        "c-done",
        "pass",
    )
    ref = backend.create(s, OWNER)
    deadline = time.monotonic() + 20
    while backend.status(ref).tasks[0].phase.value != "Succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert sweep(backend, "default", states({"scheduled__1": "success"})) == []
    assert backend.exists(ref)


# Worker 0 exports version 1 onto the models volume and exits 0; a PS, where there is
# one, runs on: the training finished while nobody was waiting on it.
EXPORTS_THEN_SUCCEEDS = """
import json, os, time
if os.environ["TFK_ROLE"] == "ps":
    time.sleep(300)
elif os.environ["TFK_INDEX"] == "0":
    path = os.path.join(os.environ["TFK_MODEL_DIR"], "m", "1")
    os.makedirs(path)
    print(json.dumps({"tfk": "export", "path": path}), flush=True)
"""


@pytest.mark.parametrize(
    ("mode", "state"),
    [
        ("between_graph", "failed"),
        ("all_reduce", "failed"),
        ("between_graph", None),
        ("all_reduce", "removed"),
    ],
)
def test_a_finished_run_of_a_failed_task_loses_its_exports(backend, mode, state) -> None:
    """The task was killed; its cluster finished and exported anyway. Nobody accepted
    that run: the sweeper sets its version aside (with a PS still running, or with every
    task exited) and deletes the cluster, so nothing of it can be published."""
    from airflow_tfk.spec.cluster import StorageSpec, VolumeSpec

    s = python_cluster(
        f"c-exp-{mode[:3]}-{state or 'gone'}",
        EXPORTS_THEN_SUCCEEDS,
        workers=2,
        mode=mode,
        storage=StorageSpec(models=VolumeSpec(size="1Gi")),
        **({"ps": RoleSpec()} if mode == "between_graph" else {}),
    )
    ref = backend.create(s, OWNER)
    deadline = time.monotonic() + 30
    while {t.phase.value for t in backend.status(ref).tasks if t.role == "worker"} != {"Succeeded"}:
        assert time.monotonic() < deadline, backend.logs(ref, "worker", 0)
        time.sleep(0.1)
    models = Path(local_state(backend, ref)["volumes"]["models"]) / "m"
    assert (models / "1").is_dir()
    said: list[str] = []
    swept = sweep(backend, "default", states({"scheduled__1": state}), emit=said.append)
    assert [r.ref for r in swept] == [ref], said
    names = sorted(p.name for p in models.iterdir())
    assert "1" not in names and any(n.startswith(".failed-1-") for n in names), names
    assert any("set aside" in m for m in said), said
    assert not backend.exists(ref) and backend._marked(ref) == []
    # Swept once: nothing is left for the next sweep to do.
    assert sweep(backend, "default", states({"scheduled__1": state})) == []


def test_a_finished_run_of_a_succeeded_task_keeps_its_exports(backend) -> None:
    from airflow_tfk.spec.cluster import StorageSpec, VolumeSpec

    s = python_cluster(
        "c-exp-ok",
        EXPORTS_THEN_SUCCEEDS,
        mode="between_graph",
        ps=RoleSpec(),
        storage=StorageSpec(models=VolumeSpec(size="1Gi")),
        max_duration_seconds=3600,
    )
    ref = backend.create(s, OWNER)
    deadline = time.monotonic() + 30
    while {t.phase.value for t in backend.status(ref).tasks if t.role == "worker"} != {"Succeeded"}:
        assert time.monotonic() < deadline, backend.logs(ref, "worker", 0)
        time.sleep(0.1)
    swept = sweep(backend, "default", states({"scheduled__1": "success"}), now=time.time() + 3601)
    # The PS is stopped by the sweep. (The worker's supervisor, which wrote "Succeeded", may
    # still be in its own interpreter's exit for a moment on a loaded machine: not counted.)
    assert [r.ref for r in swept] == [ref] and backend._marked(ref, ["ps"]) == []
    models = Path(local_state(backend, ref)["volumes"]["models"]) / "m"
    assert [p.name for p in models.iterdir()] == ["1"]
    assert backend.exists(ref)


WAITER = """
import sys
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.run.lifecycle import create_or_reattach
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.cluster import TFClusterSpec, RoleSpec
from airflow_tfk.run.wait import wait_for_cluster
b = LocalBackend(sys.argv[1], kill_grace_seconds=0.5)
s = TFClusterSpec(name="waited", image="x:1", command=(sys.executable, "-c", "import time; time.sleep(300)"),
                  ps=RoleSpec(), worker=RoleSpec(replicas=2))
ref = create_or_reattach(b, s, RunIdentity("dag", "train", "killed", -1), print)
print("WAITING", flush=True)
wait_for_cluster(b, ref, s.mode, {"ps": 1, "worker": 2}, progress_interval=1, emit=print)
"""


def test_sigkilled_waiter_then_the_sweeper_leaves_nothing(backend, tmp_path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WAITER), backend.root],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "WAITING" in line:
            break
    ref = ClusterRef("waited", "default")
    os.kill(proc.pid, signal.SIGKILL)  # no on_kill, no finally: the cluster is orphaned
    proc.wait(10)
    # 3 supervisors + 3 tasks keep running. A supervisor is recorded before it starts its
    # task (create() does not wait for the tasks), so on a loaded machine a task may
    # appear a moment later: wait for it, rather than sleep and hope.
    deadline = time.monotonic() + 30
    while len(marked := backend._marked(ref)) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(marked) == 6, marked
    swept = sweep(backend, None, states({"killed": "failed"}))
    assert [r.ref for r in swept] == [ref]
    assert backend._marked(ref) == [] and not backend.exists(ref)


def test_operator_asks_airflow_for_the_owner_state(backend) -> None:
    backend.create(spec("c-op"), RunIdentity("dag", "train", "r1", 3))
    asked = []

    def get_task_states(**kw):
        asked.append(kw)
        return {"r1": {"train_3": "failed"}}

    ti = SimpleNamespace(get_task_states=get_task_states)
    assert task_state(ti, RunIdentity("dag", "train", "r1", 3)) == "failed"
    assert asked[0] == {"dag_id": "dag", "task_ids": ["train"], "run_ids": ["r1"], "map_index": 3}
    op = TFSweepOrphansOperator(task_id="sweep", backend="local", backend_config=backend.config())
    out = op.execute({"ti": ti})
    assert out == [{"name": "c-op", "namespace": "default", "reason": out[0]["reason"], "deleted": True}]
    assert "is failed" in out[0]["reason"]


def test_a_finished_training_loses_only_what_never_exits(backend) -> None:
    """Its workers succeeded, its PS runs past the deadline: the sweeper stops the PS and
    keeps the finished workers, so a retry of the task finds the training succeeded."""
    from airflow_tfk.run.lifecycle import create_or_reattach

    s = python_cluster(
        "c-finished",
        "import os, time; os.environ['TFK_ROLE'] == 'ps' and time.sleep(300)",
        ps=RoleSpec(),
        workers=2,
        max_duration_seconds=3600,
        mode="between_graph",
    )
    ref = backend.create(s, OWNER)
    deadline = time.monotonic() + 30
    while {t.phase.value for t in backend.status(ref).tasks if t.role == "worker"} != {"Succeeded"}:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    swept = sweep(backend, "default", states({"scheduled__1": "up_for_retry"}), now=time.time() + 3601)
    assert [r.ref for r in swept] == [ref] and "deadline" in swept[0].reason
    assert backend._marked(ref, ["ps"]) == []  # the PS is stopped (see above)
    said: list[str] = []
    assert create_or_reattach(backend, s, OWNER, said.append) == ref
    assert any("reattaching" in m for m in said) and not any("creating" in m for m in said), said


EXPORT_WAITER = """
import sys
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.run.lifecycle import create_or_reattach
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.cluster import RoleSpec, StorageSpec, TFClusterSpec, VolumeSpec
from airflow_tfk.run.wait import wait_for_cluster
b = LocalBackend(sys.argv[1], kill_grace_seconds=0.5)
s = TFClusterSpec(name="killed-exports", image="x:1", command=(sys.executable, "-c", sys.argv[2]),
                  ps=RoleSpec(), worker=RoleSpec(replicas=2),
                  storage=StorageSpec(models=VolumeSpec(size="1Gi")))
ref = create_or_reattach(b, s, RunIdentity("dag", "train", "killed", -1), print)
print("WAITING", flush=True)
wait_for_cluster(b, ref, s.mode, {"ps": 1, "worker": 2}, progress_interval=1, emit=print)
"""
# The workers wait for the go file, then worker 0 exports version 1; the PS runs on.
EXPORTS_WHEN_TOLD = EXPORTS_THEN_SUCCEEDS.replace(
    'elif os.environ["TFK_INDEX"] == "0":',
    'else:\n    while not os.path.exists(os.environ["TFK_MODEL_DIR"] + "/go"):\n        time.sleep(0.1)\n'
    'if os.environ["TFK_ROLE"] == "worker" and os.environ["TFK_INDEX"] == "0":',
)


def test_sigkilled_task_then_its_orphan_exports_then_the_sweeper_sets_it_aside(backend, tmp_path) -> None:
    """The issue's run: the Airflow task is SIGKILLed while it waits, its cluster finishes
    and exports version 1 anyway; the task instance is failed. The sweeper leaves no
    process and no publishable version."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(EXPORT_WAITER), backend.root, EXPORTS_WHEN_TOLD],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(tmp_path),
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "WAITING" in line:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    ref = ClusterRef("killed-exports", "default")
    models = Path(local_state(backend, ref)["volumes"]["models"])
    (models / "go").touch()  # the orphan trains on and exports
    deadline = time.monotonic() + 30
    while {t.phase.value for t in backend.status(ref).tasks if t.role == "worker"} != {"Succeeded"}:
        assert time.monotonic() < deadline, backend.logs(ref, "worker", 0)
        time.sleep(0.1)
    assert (models / "m" / "1").is_dir()
    said: list[str] = []
    swept = sweep(backend, None, states({"killed": "failed"}), emit=said.append)
    assert [r.ref for r in swept] == [ref], said
    assert backend._marked(ref) == [] and not backend.exists(ref)
    names = [p.name for p in (models / "m").iterdir()]
    assert "1" not in names and any(n.startswith(".failed-1-") for n in names), names
