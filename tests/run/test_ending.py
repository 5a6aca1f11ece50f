"""Every path that ends a run ends it through :func:`airflow_tfk.run.ending.end_run`, on the
real local backend (processes, real operator and trigger code): a run that did not succeed
never leaves a publishable model version behind, whichever path ended it, and a
succeeded one keeps its version.

Each run exports version 1 of model ``m`` onto its ``models`` claim, then succeeds,
fails or trains on. The sweeper's and a sweep trial's ends are in tests/run/test_orphans.py
and tests/sweep; who may end a cluster is tests/run/test_ending_owner.py.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.operators.training import TFTrainingOperator
from airflow_tfk.run.handle import ClusterHandle
from airflow_tfk.run.lifecycle import apply_previous_run_policy, create_or_reattach
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.run_policy import PreviousRunPolicy
from airflow_tfk.triggers.cluster import TFClusterDoneTrigger
from tests.helpers import assert_no_processes, execute_in_thread, task_context, wait_for

pytestmark = pytest.mark.timeout(120)

EXPORTER = """
import json, os, sys, time
base = os.path.join(os.environ["TFK_MODEL_DIR"], "m", "1")
os.makedirs(base, exist_ok=True); open(os.path.join(base, "saved_model.pb"), "w").write("x")
print(json.dumps({"tfk": "export", "path": base, "model_name": "m", "version": 1}), flush=True)
then = os.environ["THEN"]
if then == "train on":
    time.sleep(120)
sys.exit(int(then))
"""
OWNER = RunIdentity("dag", "train", "manual__1", -1)


def exporter(then: str, **fields) -> dict:
    return {
        "image": "local/unused:1",
        "mode": "all_reduce",
        "command": [sys.executable, "-c", EXPORTER],
        "worker": {"replicas": 1},
        "env": {"THEN": then},
        "storage": {"models": {"claim": "models"}},
        "ps_grace_seconds": 0,
        **fields,
    }


def models(root: Path) -> Path:
    return LocalBackend(str(root)).claim_path("default", "models") / "m"


def published(root: Path) -> list[str]:
    """The versions a server or publish would see (integer names only)."""
    m = models(root)
    return sorted(p.name for p in m.iterdir() if p.name.isdigit()) if m.is_dir() else []


def set_aside(root: Path) -> list[str]:
    return sorted(p.name for p in models(root).iterdir() if p.name.startswith(".failed-1-"))


def exported(root: Path) -> None:
    wait_for(lambda: (models(root) / "1" / "saved_model.pb").exists(), 30, "the export")


def op(spec: dict, **kwargs) -> TFTrainingOperator:
    return TFTrainingOperator(
        task_id="train", backend="local", cluster_spec=spec, progress_interval=0.2, **kwargs
    )


def cluster_of(ctx: dict) -> ClusterRef:
    ti = ctx["ti"]
    return ClusterRef(RunIdentity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index).cluster_name(), "default")


def test_success_keeps_its_export(local_root) -> None:
    ctx = task_context()
    result = op(exporter("0"), cleanup="all").execute(ctx)
    assert result["outcome"] == "succeeded" and result["model_version"] == 1
    assert published(local_root) == ["1"] and set_aside(local_root) == []
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))


def test_failure_sets_the_export_aside(local_root, capfd) -> None:
    ctx = task_context()
    with pytest.raises(TrainingFailed):
        op(exporter("1")).execute(ctx)
    assert published(local_root) == [] and len(set_aside(local_root)) == 1
    out = capfd.readouterr().out
    assert "----- log of worker-0" in out  # the failed task's log, copied before the delete
    assert "why: deleted by its own task" in out
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))


def test_on_failure_keep_sets_the_export_aside_and_keeps_the_tasks(local_root) -> None:
    ctx = task_context()
    with pytest.raises(TrainingFailed):
        op(exporter("1"), on_failure="keep").execute(ctx)
    assert published(local_root) == [] and len(set_aside(local_root)) == 1
    assert LocalBackend(str(local_root)).exists(cluster_of(ctx))  # kept for debugging


def test_kill_sets_the_export_aside(local_root) -> None:
    ctx = task_context()
    training = op(exporter("train on"))
    thread, errors = execute_in_thread(training, ctx)
    exported(local_root)
    training.on_kill()
    thread.join(30)
    assert not thread.is_alive() and errors
    assert published(local_root) == [] and len(set_aside(local_root)) == 1
    assert not LocalBackend(str(local_root)).exists(cluster_of(ctx))
    assert_no_processes(local_root)


def test_timeout_sets_the_export_aside(local_root) -> None:
    from airflow.sdk.execution_time.timeout import timeout

    ctx = task_context()
    with pytest.raises(AirflowTaskTimeout), timeout(6):
        op(exporter("train on")).execute(ctx)
    assert published(local_root) == [] and len(set_aside(local_root)) == 1
    assert_no_processes(local_root)


def test_replace_on_a_changed_spec_sets_a_running_runs_export_aside(local_root) -> None:
    backend = LocalBackend(str(local_root))
    first = TFClusterSpec.from_dict({**exporter("train on"), "name": "replaced"})
    ref = create_or_reattach(backend, first, OWNER, lambda m: None)
    exported(local_root)
    said: list[str] = []
    changed = TFClusterSpec.from_dict(
        {**exporter("train on"), "name": "replaced", "env": {"THEN": "train on", "X": "1"}}
    )
    create_or_reattach(backend, changed, OWNER, said.append)
    assert any("created from another spec" in m for m in said), said
    assert any("why: replaced by a re-run of its task with another spec" in m for m in said), said
    assert len(set_aside(local_root)) == 1
    assert backend.owner(ref).spec_hash == changed.fingerprint()  # type: ignore[union-attr]


def test_replace_of_a_succeeded_run_keeps_its_export(local_root) -> None:
    """Its version may be published already: a re-run with another spec must not hide it."""
    backend = LocalBackend(str(local_root))
    first = TFClusterSpec.from_dict({**exporter("0"), "name": "replaced-ok"})
    ref = create_or_reattach(backend, first, OWNER, lambda m: None)
    wait_for(lambda: backend.status(ref).tasks[0].phase.value == "Succeeded", 30, "the success")
    changed = TFClusterSpec.from_dict(
        {**exporter("0"), "name": "replaced-ok", "env": {"THEN": "0", "X": "1"}}
    )
    create_or_reattach(backend, changed, OWNER, lambda m: None)
    assert published(local_root) == ["1"] and set_aside(local_root) == []


def test_a_retry_replacing_a_failed_cluster_sets_its_export_aside(local_root) -> None:
    backend = LocalBackend(str(local_root))
    spec = TFClusterSpec.from_dict({**exporter("1"), "name": "retried"})
    ref = create_or_reattach(backend, spec, OWNER, lambda m: None)
    wait_for(lambda: backend.status(ref).tasks[0].phase.value == "Failed", 30, "the failure")
    said: list[str] = []
    create_or_reattach(backend, spec, OWNER, said.append)
    assert any("why: replaced by a retry of its task" in m for m in said), said
    assert any("----- log of worker-0" in m for m in said), said  # the previous try's log
    assert len(set_aside(local_root)) == 1


def test_kill_previous_sets_the_earlier_runs_export_aside(local_root) -> None:
    backend = LocalBackend(str(local_root))
    earlier = RunIdentity("dag", "train", "scheduled__1", -1)
    newer = RunIdentity("dag", "train", "scheduled__2", -1)
    spec = TFClusterSpec.from_dict({**exporter("train on"), "name": earlier.cluster_name()})
    ref = create_or_reattach(backend, spec, earlier, lambda m: None)
    exported(local_root)
    said: list[str] = []
    spec2 = TFClusterSpec.from_dict({**exporter("train on"), "name": newer.cluster_name()})
    assert apply_previous_run_policy(backend, spec2, newer, PreviousRunPolicy.KILL_PREVIOUS, said.append)
    assert not backend.exists(ref)
    assert "killed by the newer run scheduled__2" in backend.status(ref).deleted_reason
    assert published(local_root) == [] and len(set_aside(local_root)) == 1
    assert_no_processes(local_root)


def test_the_triggers_on_kill_sets_the_export_aside(local_root) -> None:
    backend = LocalBackend(str(local_root))
    spec = TFClusterSpec.from_dict({**exporter("train on"), "name": "deferred"})
    ref = create_or_reattach(backend, spec, OWNER, lambda m: None)
    exported(local_root)
    handle = ClusterHandle.for_spec(spec, backend, OWNER)
    trigger = TFClusterDoneTrigger.for_handle(handle, progress_interval=1)
    # The trigger is rebuilt from its serialized form in the triggerer: the owner with it.
    trigger = TFClusterDoneTrigger(**trigger.serialize()[1])
    asyncio.run(trigger.on_kill())
    assert not backend.exists(ref) and "killed while deferred" in backend.status(ref).deleted_reason
    assert published(local_root) == [] and len(set_aside(local_root)) == 1
    assert_no_processes(local_root)


def teardown(local_root: Path, then: str, name: str) -> ClusterRef:
    """TFDeleteClusterOperator, which runs whatever happened upstream, on a run that
    exported and then did ``then``."""
    from airflow_tfk.operators.cluster import TFDeleteClusterOperator

    backend = LocalBackend(str(local_root))
    spec = TFClusterSpec.from_dict({**exporter(then), "name": name})
    ref = create_or_reattach(backend, spec, OWNER, lambda m: None)
    if then == "train on":
        exported(local_root)
    else:
        wait_for(lambda: backend.status(ref).tasks[0].phase.value == "Succeeded", 30, "the success")
    handle = ClusterHandle.for_spec(spec, backend, OWNER).to_dict()
    TFDeleteClusterOperator(task_id="delete", cluster=handle).execute(task_context())
    assert not backend.exists(ref)
    return ref


def test_the_teardown_task_keeps_a_succeeded_runs_export(local_root) -> None:
    teardown(local_root, "0", "torn-ok")
    assert published(local_root) == ["1"] and set_aside(local_root) == []


def test_the_teardown_task_sets_a_cut_short_runs_export_aside(local_root) -> None:
    teardown(local_root, "train on", "torn-cut")
    assert published(local_root) == [] and len(set_aside(local_root)) == 1


def test_one_backend_per_handle(local_root, monkeypatch) -> None:
    """A task builds its backend (one Kubernetes hook) once: the wait, the logs, the
    exports and the delete of its end all go through the one its handle holds."""
    import airflow_tfk.backends as backends

    built: list[str] = []
    real = backends.get_backend

    def counting(kind: str = "kubernetes", **config):
        built.append(kind)
        return real(kind, **config)

    monkeypatch.setattr(backends, "get_backend", counting)
    with pytest.raises(TrainingFailed):
        op(exporter("1")).execute(task_context())
    assert built == ["local"] and len(set_aside(local_root)) == 1

    # A handle from an XCom builds its backend on first use, then keeps it.
    from airflow_tfk.operators.cluster import TFDeleteClusterOperator

    built.clear()
    backend = real("local", root=str(local_root))
    spec = TFClusterSpec.from_dict({**exporter("train on"), "name": "xcom"})
    create_or_reattach(backend, spec, OWNER, lambda m: None)
    handle = ClusterHandle.for_spec(spec, backend, OWNER).to_dict()
    TFDeleteClusterOperator(task_id="delete", cluster=handle).execute(task_context())
    assert built == ["local"]
