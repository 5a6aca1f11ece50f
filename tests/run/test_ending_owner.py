"""No path ends a cluster it does not own, on the real local backend.

The cluster ``owned`` belongs to one task instance (OWNER). Every path that ends a run
is driven here as another task instance (OTHER) would drive it, or, for the sweeper,
as a cluster changes hands under it: each refuses, naming the owner, and the cluster,
its processes and its PS are left exactly as they were. The Kubernetes form is
tests/k8s_integration/test_ownership.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.errors import ClusterOwnershipError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.run.lifecycle import create_or_reattach, kill_previous
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec
from tests.helpers import local_backend, local_state, task_context

pytestmark = pytest.mark.timeout(60)

OWNER = RunIdentity("dag", "train", "manual__1", -1)
OTHER = RunIdentity("dag", "train", "manual__2", -1)
NAMED = "belongs to dag 'dag', task 'train', run 'manual__1'"
SLEEPER = ("python", "-c", "import time; time.sleep(60)")


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    yield from local_backend(tmp_path / "root", tmp_path, kill_grace_seconds=0.5)


def owned_spec(**kw) -> TFClusterSpec:
    return TFClusterSpec(
        name="owned",
        image="local/unused:1",
        command=SLEEPER,
        mode="between_graph",
        ps=RoleSpec(),
        worker=RoleSpec(replicas=1),
        ps_grace_seconds=0,
        **kw,
    )


def training(**kwargs):
    from airflow_tfk.operators.training import TFTrainingOperator

    return TFTrainingOperator(task_id="train", backend="local", cluster_spec=owned_spec().to_dict(), **kwargs)


def _success(foreign: ClusterHandle, said: list[str]) -> None:
    training(cleanup="all")._finish(foreign, {"status": "success", "message": "done"})


def _failure(foreign: ClusterHandle, said: list[str]) -> None:
    with pytest.raises(Exception, match="worker-0"):
        training()._finish(foreign, {"status": "failed", "message": "worker-0 failed", "failed_task": None})


def _timeout(foreign: ClusterHandle, said: list[str]) -> None:
    from airflow.sdk.exceptions import AirflowTaskTimeout

    with pytest.raises(AirflowTaskTimeout):
        training()._finish(foreign, {"status": "timeout", "message": "late"})


def _kill(foreign: ClusterHandle, said: list[str]) -> None:
    op = training()
    op._handle, op._created = foreign, True
    op.on_kill()


def _replace(foreign: ClusterHandle, said: list[str]) -> None:
    changed = owned_spec(env={"CHANGED": "1"})
    with pytest.raises(ClusterOwnershipError) as err:
        create_or_reattach(foreign.backend(), changed, OTHER, said.append)
    said.append(str(err.value))


def _kill_previous(foreign: ClusterHandle, said: list[str]) -> None:
    """A newer run of another task (same dag) may not kill this task's run."""
    newer = RunIdentity("dag", "evaluate", "manual__3", -1)
    kill_previous(foreign.backend(), owned_spec(), newer, foreign.ref, "newer run", said.append)


def _trigger_on_kill(foreign: ClusterHandle, said: list[str]) -> None:
    from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

    trigger = TFClusterDoneTrigger.for_handle(foreign, progress_interval=1)
    trigger = TFClusterDoneTrigger(**trigger.serialize()[1])  # as the triggerer rebuilds it
    asyncio.run(trigger.on_kill())


def _teardown_task(foreign: ClusterHandle, said: list[str]) -> None:
    from airflow_tfk.operators.cluster import TFDeleteClusterOperator

    TFDeleteClusterOperator(task_id="delete", cluster=foreign.to_dict()).execute(task_context())


def _cleanup_ps_task(foreign: ClusterHandle, said: list[str]) -> None:
    from airflow_tfk.operators.cluster import TFDeleteParameterServersOperator

    assert (
        TFDeleteParameterServersOperator(task_id="ps", cluster=foreign.to_dict()).execute(task_context())
        == []
    )


def _sweeper(foreign: ClusterHandle, said: list[str]) -> None:
    """The sweeper read the cluster as a gone task instance's; by the time it ends it,
    the cluster is OWNER's (running): it is refused."""
    from airflow_tfk.backends.base import ClusterOwner
    from airflow_tfk.run.orphans import sweep

    backend = foreign.backend()
    gone = RunIdentity("dag", "train", "gone__0", -1)
    reads = iter([ClusterOwner(gone, None)])
    real = backend.owner
    backend.owner = lambda ref: next(reads, None) or real(ref)  # type: ignore[method-assign]
    states = {gone: None, OWNER: "running"}
    swept = sweep(backend, "default", lambda i: states.get(i), emit=said.append)
    assert [r.deleted for r in swept] == [False], said


def _sweep_trial(foreign: ClusterHandle, said: list[str]) -> None:
    from airflow_tfk.sweep.config import SweepConfig
    from airflow_tfk.sweep.runner import SweepRunner, _Trial

    config = SweepConfig.from_dict(
        {"n_trials": 1, "search_space": {"lr": {"type": "float", "low": 0, "high": 1}}, "objective": "score"}
    )
    runner = SweepRunner(
        foreign.backend(),
        owned_spec(),
        OTHER,
        config,
        base="owned",
        study_name="s",
        storage="sqlite://",
        emit=said.append,
    )
    told: list[object] = []
    trial = _Trial(SimpleNamespace(number=0, set_user_attr=lambda k, v: None), foreign, "worker", 0)
    runner._end(trial, "pruned")  # a pruned or interrupted trial
    runner._fail(SimpleNamespace(tell=lambda *a, **k: told.append(k)), trial, "worker-0 failed")
    assert sum(NAMED in m for m in said) == 2 and told, said


PATHS: dict[str, Callable[[ClusterHandle, list[str]], None]] = {
    "success": _success,
    "failure": _failure,
    "timeout": _timeout,
    "kill": _kill,
    "replace": _replace,
    "kill_previous": _kill_previous,
    "trigger on_kill": _trigger_on_kill,
    "teardown task": _teardown_task,
    "cleanup-ps task": _cleanup_ps_task,
    "sweeper": _sweeper,
    "sweep trial": _sweep_trial,
}


@pytest.mark.parametrize("path", list(PATHS))
def test_no_path_ends_a_cluster_it_does_not_own(backend, capfd, path: str) -> None:
    spec = owned_spec()
    ref = create_or_reattach(backend, spec, OWNER, lambda m: None)
    before = local_state(backend, ref)
    foreign = ClusterHandle.for_spec(spec, backend, OTHER)
    said: list[str] = []
    PATHS[path](foreign, said)
    told = "\n".join(said) + capfd.readouterr().out
    assert NAMED in told, told[-3000:]
    after = local_state(backend, ref)
    assert backend.exists(ref) and after["uid"] == before["uid"]
    assert after["tasks"] == before["tasks"]  # the same processes
    status = backend.status(ref)
    ended = [
        t.name for t in status.tasks if t.reason == "Deleted" or t.phase.value not in ("Running", "Pending")
    ]
    assert ended == [], status.summary()
    assert backend.owner(ClusterRef("owned", "default")).identity == OWNER  # type: ignore[union-attr]
