"""TFClusterDoneTrigger on the local backend (real processes running the stand-in trainer),
run in an asyncio loop as the triggerer runs it: one event per run, with a ``status``
instead of an exception, and the cluster deleted when its task is killed while deferred."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.triggers.cluster import TFClusterDoneTrigger
from tests.helpers import assert_no_processes, python_cluster, spec_dict, wait_for


def start(root: Path, name: str, **env: str) -> tuple[LocalBackend, ClusterRef, TFClusterDoneTrigger]:
    backend = LocalBackend(str(root))
    spec = TFClusterSpec.from_dict({**spec_dict("between_graph", workers=2, **env), "name": name})
    ref = backend.create(spec)
    trigger = TFClusterDoneTrigger(
        cluster=ref.to_dict(),
        backend_kind="local",
        backend_config=backend.config(),
        mode="between_graph",
        replicas={"ps": 1, "worker": 2},
        progress_interval=0.1,
    )
    return backend, ref, trigger


def events(trigger: TFClusterDoneTrigger) -> list[dict]:
    async def collect() -> list[dict]:
        return [event.payload async for event in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), 120))


def test_serializes_to_what_rebuilds_it(local_root: Path) -> None:
    _, ref, trigger = start(local_root, "trig-ser", STEPS="1")
    path, kwargs = trigger.serialize()
    assert path == "airflow_tfk.triggers.cluster.TFClusterDoneTrigger"
    assert TFClusterDoneTrigger(**kwargs).serialize() == (path, kwargs)
    assert kwargs["cluster"] == ref.to_dict()


def test_success_is_one_event(local_root: Path) -> None:
    backend, ref, trigger = start(local_root, "trig-ok", STEPS="2")
    got = events(trigger)
    assert [e["status"] for e in got] == ["success"]
    assert got[0]["cluster"] == ref.to_dict() and got[0]["failed_task"] is None
    backend.delete(ref)
    assert_no_processes(local_root)


def test_a_failed_task_is_a_failed_event_with_its_reason(local_root: Path) -> None:
    backend, ref, trigger = start(local_root, "trig-fail", STEPS="1", EXIT_CODE_1="3")
    (event,) = events(trigger)
    assert event["status"] == "failed"
    assert event["failed_task"]["role"] == "worker" and event["failed_task"]["index"] == 1
    assert event["failed_task"]["exit_code"] == 3 and "worker-1" in event["message"]
    backend.delete(ref)


def test_the_deadline_is_a_timeout_event(local_root: Path) -> None:
    backend, ref, trigger = start(local_root, "trig-late", STEPS="1000", STEP_SECONDS="1")
    trigger.deadline = time.time() + 1
    started = time.monotonic()
    (event,) = events(trigger)
    assert event["status"] == "timeout" and "execution_timeout" in event["message"]
    assert time.monotonic() - started < 30
    backend.delete(ref)


def test_an_error_is_an_event_not_an_exception(local_root: Path) -> None:
    trigger = TFClusterDoneTrigger(
        cluster={"name": "x", "namespace": "default"},
        backend_kind="nonsense",
        backend_config={},
        mode="between_graph",
        replicas={"worker": 1},
    )
    (event,) = events(trigger)
    assert event["status"] == "error" and "nonsense" in event["message"]


def test_killed_while_deferred_deletes_the_cluster(local_root: Path) -> None:
    backend, ref, trigger = start(local_root, "trig-kill", STEPS="1000", STEP_SECONDS="1")
    assert backend.exists(ref)
    asyncio.run(trigger.on_kill())
    assert not backend.exists(ref)
    assert_no_processes(local_root)


EXPORT_THEN_TRAIN_ON = """
import json, os, time
base = os.path.join(os.environ["TFK_MODEL_DIR"], "m", "1")
os.makedirs(base); open(os.path.join(base, "saved_model.pb"), "w").write("x")
print(json.dumps({"tfk": "export", "path": base, "model_name": "m", "version": 1}), flush=True)
time.sleep(120)
"""


def test_killed_while_deferred_sets_the_runs_export_aside(local_root: Path) -> None:
    """A run killed while deferred is a failed run: what it exported is never published
    (as when the operator's own on_kill tears it down)."""

    from airflow_tfk.spec.cluster import StorageSpec, VolumeSpec

    backend = LocalBackend(str(local_root))
    spec = python_cluster(
        "trig-kill-export",
        EXPORT_THEN_TRAIN_ON,
        storage=StorageSpec(models=VolumeSpec(claim="models")),
    )
    ref = backend.create(spec)
    models = backend.claim_path(ref.namespace, "models") / "m"
    wait_for(lambda: (models / "1" / "saved_model.pb").exists(), what="the export")
    trigger = TFClusterDoneTrigger(
        cluster=ref.to_dict(),
        backend_kind="local",
        backend_config=backend.config(),
        mode="all_reduce",
        replicas={"worker": 1},
    )
    asyncio.run(trigger.on_kill())
    assert not backend.exists(ref)
    assert [p.name for p in models.iterdir() if p.name.isdigit()] == []
    assert [p.name for p in models.iterdir() if p.name.startswith(".failed-1-")], list(models.iterdir())
    assert_no_processes(local_root)
