"""The local backend's security and robustness promises (issue 10, items 2-4), on real
processes: no secret of the Airflow environment reaches a task, nothing it creates is
group- or world-readable, every listener is on loopback (TensorFlow's gRPC server
included), and stopping a cluster does not depend on its state file.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import psutil
import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.backends.local.files import MARKER_ENV
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec
from tests.helpers import local_state, python_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
# Binds the wildcard addresses, as TensorFlow's gRPC server does, records its env, sleeps.
WILDCARD_TASK = """
import json, os, socket, sys, time
for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0)); s.listen(); globals().setdefault("keep", []).append(s)
out = os.path.join(os.environ["RECORD"], os.environ["TFK_LOCAL_TASK"] + ".json")
with open(out, "w") as fh:
    json.dump(dict(os.environ), fh)
open(os.path.join(os.environ.get("TFK_MODEL_DIR", "."), "model-" + os.environ["TFK_INDEX"]), "w").write("x")
time.sleep(120)
"""


def marked(backend: LocalBackend, ref: ClusterRef) -> list[int]:
    return [p.pid for p in backend._marked(ref)]


@pytest.fixture
def backend(tmp_path: Path):
    b = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), kill_grace_seconds=1.0)
    yield b
    for ns in (tmp_path / "root").glob("*"):
        for cdir in ns.glob("[a-z]*"):
            b.delete(ClusterRef(cdir.name, ns.name))


def spec(tmp_path: Path, name: str = "sec", workers: int = 2, **kw) -> TFClusterSpec:
    from airflow_tfk.spec.cluster import StorageSpec, VolumeSpec

    record = tmp_path / "record"
    record.mkdir(exist_ok=True)
    return python_cluster(
        name,
        WILDCARD_TASK,
        workers=workers,
        mode="between_graph",
        ps=RoleSpec(replicas=1),
        env={"RECORD": str(record)},
        storage=StorageSpec(models=VolumeSpec(size="1Gi")),
        **kw,
    )


def test_no_airflow_secret_reaches_a_task_and_nothing_is_group_or_world_readable(
    backend, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgres://user:hunter2@db/prod")
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "s3cr3t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    os.umask(0o022)  # a usual umask: the backend must not rely on the caller's
    s = spec(tmp_path)
    ref = backend.create(s)
    record = tmp_path / "record"
    wait_for(lambda: len(list(record.glob("*.json"))) == 3, what="three task records")
    for f in record.glob("*.json"):
        env = json.loads(f.read_text())
        leaked = sorted(k for k in env if k.startswith("AIRFLOW") or "SECRET" in k)
        assert leaked == [], (f.name, leaked)
        assert "hunter2" not in json.dumps(env)
    # The backend's own records hold no secret either.
    for f in Path(backend.root).rglob("*.json"):
        assert "hunter2" not in f.read_text() and "s3cr3t" not in f.read_text(), f
    # The supervisors were started with a minimal environment too.
    for pid in marked(backend, ref):
        assert not any(k.startswith("AIRFLOW") for k in psutil.Process(pid).environ())

    loose = []
    for path in [Path(backend.root), *Path(backend.root).rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            loose.append(f"{oct(mode)} {path.relative_to(backend.root)}")
    assert loose == [], loose  # state, logs, task records, volumes and the task's model file
    backend.delete(ref)


def test_every_listening_socket_is_on_loopback(backend, tmp_path) -> None:
    ref = backend.create(spec(tmp_path, "ports"))
    wait_for(lambda: len(list((tmp_path / "record").glob("*.json"))) == 3, what="records")
    listening = []
    for pid in marked(backend, ref):
        proc = psutil.Process(pid)
        for conn in proc.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                listening.append((pid, conn.laddr.ip))
    assert len(listening) >= 6  # two wildcard binds per task, three tasks
    assert {ip for _, ip in listening} <= LOOPBACK, listening


# slow: two real TensorFlow processes (~8 CPU-seconds of TF start-up); the fast lane keeps
# test_every_listening_socket_is_on_loopback, whose tasks bind the same wildcard addresses.
@pytest.mark.slow
def test_tensorflow_grpc_servers_listen_on_loopback_only(backend, tmp_path) -> None:
    """The real thing: TensorFlow's gRPC server asks for the wildcard address."""
    pytest.importorskip("tensorflow")
    script = (
        "import json, os, time, tensorflow as tf\n"
        "c = json.loads(os.environ['TF_CONFIG'])\n"
        "tf.distribute.Server(tf.train.ClusterSpec(c['cluster']), job_name=c['task']['type'],"
        " task_index=c['task']['index'], start=True)\n"
        "print('SERVING', flush=True); time.sleep(120)\n"
    )
    s = python_cluster(
        "tfgrpc",
        script,
        mode="between_graph",
        ps=RoleSpec(replicas=1),
        env={"TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    ref = backend.create(s)
    wait_for(
        lambda: all("SERVING" in backend.logs(ref, r, 0) for r in ("ps", "worker")),
        timeout=90,
        what="both gRPC servers up",
    )
    ports = {int(a.rsplit(":", 1)[1]) for a in local_state(backend, ref)["cluster"]["ps"]}
    ports |= {int(a.rsplit(":", 1)[1]) for a in local_state(backend, ref)["cluster"]["worker"]}
    listening = [
        (c.laddr.ip, c.laddr.port)
        for pid in marked(backend, ref)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert ports <= {port for _, port in listening}, (ports, listening)
    assert {ip for ip, _ in listening} <= LOOPBACK, listening


@pytest.mark.parametrize("damage", ["remove the cluster directory", "corrupt state.json"])
def test_stopping_does_not_depend_on_the_state_file(backend, tmp_path, damage) -> None:
    ref = backend.create(spec(tmp_path, "damaged"))
    pids = wait_for(lambda: len(marked(backend, ref)) >= 6 and marked(backend, ref), what="procs")
    cdir = backend.cluster_dir(ref)
    if damage.startswith("remove"):
        # The supervisors write into it meanwhile (a task that stops writes exit.json), so
        # one rmtree can race them: remove until it is gone.
        wait_for(lambda: shutil.rmtree(cdir, ignore_errors=True) or not cdir.exists(), what="removed")
        # The supervisors notice on their own (no waiter, no delete needed).
        wait_for(lambda: not marked(backend, ref), timeout=40, what="tasks stopped by themselves")
    else:
        (cdir / "state.json").write_text("{not json")
        backend.delete(ref)
        assert marked(backend, ref) == []

    def left() -> list:
        out = []
        for p in pids:
            try:
                proc = psutil.Process(p)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    out.append((p, proc.status(), proc.cmdline()[:3]))
            except psutil.Error:
                pass
        return out

    # A process the tag no longer finds may still be exiting (empty cmdline) for a moment.
    wait_for(lambda: not left(), timeout=10, what=f"every process gone: {left()}")
    assert not backend.exists(ref)


def test_a_tagged_orphan_without_state_blocks_a_new_cluster_of_that_name(backend, tmp_path) -> None:
    from airflow_tfk.core.errors import LocalMachineError

    s = spec(tmp_path, "orphan", workers=1)
    ref = backend.create(s)
    wait_for(lambda: len(marked(backend, ref)) >= 4, what="procs")
    (backend.cluster_dir(ref) / "state.json").unlink()
    with pytest.raises(LocalMachineError, match="^name: processes of an earlier local cluster"):
        backend.create(s)
    backend.delete(ref)
    assert marked(backend, ref) == []
    backend.create(s)  # now it starts afresh
    assert (
        MARKER_ENV
        in json.loads((backend.cluster_dir(ref) / "tasks" / "worker-0" / "task.json").read_text())["env"]
    )


EXPORT_THEN_FAIL = """
import json, os, sys
base = os.path.join(os.environ["TFK_MODEL_DIR"], "m", "1")
os.makedirs(base); open(os.path.join(base, "saved_model.pb"), "w").write("x")
print(json.dumps({"tfk": "export", "path": base, "model_name": "m", "version": 1}), flush=True)
outside = os.environ["OUTSIDE"]
print(json.dumps({"tfk": "export", "path": outside}), flush=True)  # not the run's to hide
sys.exit(1)
"""


def test_a_failed_run_leaves_no_publishable_model_version(backend, tmp_path) -> None:
    from airflow_tfk.run.ending import end_run
    from airflow_tfk.run.handle import ClusterHandle
    from airflow_tfk.spec.cluster import StorageSpec, VolumeSpec

    outside = tmp_path / "elsewhere" / "7"
    outside.mkdir(parents=True)
    s = python_cluster(
        "exportfail",
        EXPORT_THEN_FAIL,
        env={"OUTSIDE": str(outside)},
        storage=StorageSpec(models=VolumeSpec(size="1Gi")),
    )
    ref = backend.create(s)
    wait_for(lambda: backend.status(ref).tasks[0].phase.value == "Failed", what="the failure")
    models = Path(local_state(backend, ref)["volumes"]["models"]) / "m"
    assert [p.name for p in models.iterdir()] == ["1"]
    said: list[str] = []
    end_run(ClusterHandle.for_spec(s, backend), "the training failed", emit=said.append)
    assert [p.name for p in models.iterdir() if p.name.isdigit()] == []  # nothing to publish
    assert any(p.name.startswith(".failed-1-") for p in models.iterdir())
    assert outside.is_dir()  # a path outside the run's volumes is never touched
    assert any("set aside" in m for m in said), said


EXPORT_ONCE_THEN_FAIL = """
import json, os, sys, time
flag = os.path.join(os.environ["RECORD"], "exported")
if os.path.exists(flag):  # the retry: trains on, exports nothing yet
    time.sleep(120)
open(flag, "w").close()
base = os.path.join(os.environ["TFK_MODEL_DIR"], "m", "1")
os.makedirs(base); open(os.path.join(base, "saved_model.pb"), "w").write("x")
print(json.dumps({"tfk": "export", "path": base, "model_name": "m", "version": 1}), flush=True)
sys.exit(1)
"""


def test_a_retry_sets_the_failed_runs_export_aside_and_does_not_build_on_it(backend, tmp_path) -> None:
    """The retry replaces the failed cluster: the version it exported on the shared claim
    is set aside first, so the retry's export is version 1 again, not 2."""
    from airflow_tfk.core.naming import RunIdentity
    from airflow_tfk.run.lifecycle import create_or_reattach
    from airflow_tfk.runtime.export import next_version
    from airflow_tfk.spec.cluster import StorageSpec, VolumeSpec

    record = tmp_path / "record"
    record.mkdir()
    s = python_cluster(
        "exportretry",
        EXPORT_ONCE_THEN_FAIL,
        env={"RECORD": str(record)},
        storage=StorageSpec(models=VolumeSpec(claim="models")),
    )
    me = RunIdentity("dag", "train", "manual__1", -1)
    ref = create_or_reattach(backend, s, me)
    wait_for(lambda: backend.status(ref).tasks[0].phase.value == "Failed", what="the failure")
    models = backend.claim_path(ref.namespace, "models") / "m"
    assert [p.name for p in models.iterdir()] == ["1"]
    said: list[str] = []
    assert create_or_reattach(backend, s, me, said.append) == ref
    assert any("replacing failed cluster" in m for m in said), said
    assert any("set aside, so it is never published" in m for m in said), said
    assert [p.name for p in models.iterdir() if p.name.isdigit()] == []
    assert next_version(str(models)) == 1  # the retry does not build on the failed version
    wait_for(lambda: backend.status(ref).tasks[0].phase.value == "Running", what="the retry")
