"""Helpers of the operator, sensor and trigger tests on the local backend: an Airflow
context, a cluster spec running the stand-in trainer (tests/operators/tasks/trainer.py),
and checks that no process of a cluster is left. Import them:
``from tests.helpers import task_context, spec_dict, assert_no_processes``.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec

ROOT = Path(__file__).resolve().parents[1]
TRAINER = str(Path(__file__).parent / "operators" / "tasks" / "trainer.py")

# The spec the spec, render and CLI tests start from (between_graph, 2 PS, 3 workers), its
# storage, and the objects it renders to, in the order they are created.
IMAGENET: dict = {
    "name": "imagenet",
    "image": "tensorflow/tensorflow:2.21.0",
    "mode": "between_graph",
    "command": ["python", "/opt/imagenet.py"],
    "ps": {"replicas": 2},
    "worker": {"replicas": 3},
}
IMAGENET_STORAGE = {"data": {"size": "10Gi"}, "logs": {"size": "10Gi"}, "storage_class": "glusterfs"}
IMAGENET_OBJECTS = [
    ("NetworkPolicy", "imagenet-isolation"),
    ("PersistentVolumeClaim", "imagenet-data"),
    ("PersistentVolumeClaim", "imagenet-logs"),
    ("Service", "imagenet-ps"),
    ("Service", "imagenet-worker"),
    ("Job", "imagenet-ps"),
    ("Job", "imagenet-worker"),
]

# One cluster shape per training mode, with every role that mode takes: the render,
# network-policy and admission tests run each layout over these.
MODE_SHAPES: dict[str, dict] = {
    "between_graph": {"mode": "between_graph", "ps": {"replicas": 2}, "worker": {"replicas": 3}},
    "parameter_server": {
        "mode": "parameter_server",
        "ps": {"replicas": 2},
        "worker": {"replicas": 3},
        "chief": {"replicas": 1},
        "evaluator": {"replicas": 1},
    },
    "all_reduce": {"mode": "all_reduce", "worker": {"replicas": 4}},
}

#: The run identity of the render tests (a scheduled run of DAG ``nightly``).
NIGHTLY = RunIdentity("nightly", "train", "scheduled__2026-01-01T00:00:00+00:00")


def local_state(backend: LocalBackend, ref: ClusterRef) -> dict[str, Any]:
    """A local cluster's ``state.json``, as the JSON a person reads on disk."""
    return json.loads((backend.cluster_dir(ref) / "state.json").read_text())


def shaped_spec(shape: dict, **fields: Any) -> TFClusterSpec:
    """A spec in namespace ``ml`` with the roles of ``shape`` (one of MODE_SHAPES, say);
    ``fields`` add to or replace the rest."""
    data = {
        "name": "imagenet",
        "image": "tensorflow/tensorflow:2.21.0",
        "command": ["python", "/opt/train.py"],
        "namespace": "ml",
        **shape,
        **fields,
    }
    return TFClusterSpec.from_dict(copy.deepcopy(data))


def task_context(
    run_id: str = "manual__1", dag_id: str = "dag", task_id: str = "train", map_index: int = -1
) -> dict:
    """The part of an Airflow context the operators read: the task instance identity."""
    return {
        "ti": SimpleNamespace(
            dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index, try_number=1
        )
    }


def _airflow_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of an ``airflow`` command with its own ``home`` and the repository's
    example DAGs; ``extra`` is added to it."""
    bin_dir = Path(sys.executable).parent
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    }


def _migrate(env: dict[str, str]) -> None:
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)


# One ``airflow db migrate`` per test process: its SQLite file, copied into every home.
# Each migrate costs seconds of CPU (8.7 s measured at load 9 on the 2-core machine) for
# the same result every time; the copy is byte for byte what that one migrate left.
_TEMPLATE: list[Path] = []
_TEMPLATE_LOCK = threading.Lock()


def _migrated_template() -> Path:
    with _TEMPLATE_LOCK:
        if not _TEMPLATE:
            home = Path(tempfile.mkdtemp(prefix="tfk-airflow-migrated-"))
            atexit.register(shutil.rmtree, home, True)
            _migrate(_airflow_env(home))
            _TEMPLATE.append(home / "airflow.db")
        return _TEMPLATE[0]


def migrated_airflow_home(home: Path, **extra: str) -> dict[str, str]:
    """The environment of an ``airflow`` command with its own ``home`` (a migrated SQLite
    database) and the repository's example DAGs; ``extra`` is added to it.

    The database is a copy of one migrated once per test process, unless the environment
    points Airflow at another database (then that one is migrated)."""
    env = _airflow_env(home, **extra)
    if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in env:
        _migrate(env)
    else:
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_migrated_template(), home / "airflow.db")
    return env


def dags_test(
    env: dict[str, str], dag_id: str, *args: str, conf: dict | str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``airflow dags test <dag_id> *args [--conf <conf as JSON>]`` from the repository root."""
    cmd = [str(Path(sys.executable).parent / "airflow"), "dags", "test", dag_id, *args]
    if conf is not None:
        cmd += ["--conf", conf if isinstance(conf, str) else json.dumps(conf)]
    return subprocess.run(cmd, env=env, cwd=ROOT, text=True, capture_output=True, timeout=timeout)


def terminal_log(config: pytest.Config) -> Callable[[str], None]:
    """Write a line on pytest's terminal (dropped when there is none, e.g. under xdist):
    the slow session fixtures say what they built and where they kept their logs."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def log(msg: str) -> None:
        if reporter is not None:
            reporter.write_line(msg)

    return log


def execute_in_thread(op: Any, ctx: dict) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``op.execute(ctx)`` on a thread, for a test that kills or races it; what it
    raised ends up in the returned list."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            op.execute(ctx)
        except BaseException as exc:  # the test asserts on it
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def build_before_tests(config: pytest.Config, what: str, build: Callable[[], object]) -> object:
    """Run a cached build from ``pytest_collection_finish`` (a cold one takes minutes, which
    must not count against a test's timeout); say on the terminal what it built when that
    took a while. Returns what ``build`` returns; its errors propagate."""
    t0 = time.monotonic()
    built = build()
    if time.monotonic() - t0 > 5:
        terminal_log(config)(f"{what} built in {time.monotonic() - t0:.0f}s: {built}")
    return built


def wait_for(predicate: Callable[[], object], timeout: float = 20.0, what: str = "") -> object:
    """Poll ``predicate`` until it returns something true (returned), or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.02)
    return value


def local_backend(root: Path, workdir: Path, **options: Any) -> Iterator[LocalBackend]:
    """A fixture's local backend on ``root``; at the end it deletes every cluster still there."""
    backend = LocalBackend(str(root), workdir=str(workdir), **options)
    yield backend
    for state in root.glob("*/*/state.json"):
        backend.delete(ClusterRef(name=state.parent.name, namespace=state.parent.parent.name))


def python_cluster(
    name: str, script: str, *, workers: int = 1, mode: str = "all_reduce", **fields: Any
) -> TFClusterSpec:
    """A cluster whose every task runs ``python -c script`` (on the local backend, which
    ignores the image); ``fields`` are the spec's other fields (a ``ps`` for the modes with one)."""
    return TFClusterSpec(
        name=name,
        image="local/unused:1",
        command=(sys.executable, "-c", script),
        mode=mode,
        worker=RoleSpec(replicas=workers),
        **fields,
    )


def spec_dict(mode: str = "between_graph", workers: int = 2, **env: str) -> dict:
    spec = {
        "image": "local/unused:1",
        "mode": mode,
        "command": ["python", TRAINER],
        "worker": {"replicas": workers},
        "env": {"REPO_DIR": str(ROOT), **env},
        "ps_grace_seconds": 0,
    }
    if mode != "all_reduce":
        spec["ps"] = {"replicas": 1}
    if mode == "parameter_server":
        spec["chief"] = {"replicas": 1}
    return spec


def cluster_processes(root: Path) -> list[int]:
    """Live processes started for any cluster under ``root`` (supervisors carry it in argv)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(root) in part for part in p.info["cmdline"] or ()):
                if p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p.pid)
        except psutil.Error:
            pass
    return found


def assert_no_processes(root: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while cluster_processes(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster_processes(root) == []


def rbac_render() -> Any:
    """deploy/rbac/render.py, loaded under a name of its own: on ``sys.path`` as ``render`` it
    would shadow the test package ``tests/render`` for every later test of the session."""
    from tests import file_module

    return file_module.load("tfk_deploy_rbac_render", ROOT / "deploy" / "rbac" / "render.py")
