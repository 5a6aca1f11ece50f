"""The local backend: TF clusters as supervised processes on 127.0.0.1.

The task script (tests/backends/tasks/task.py) is pure Python, so every test runs in
seconds; each test proves with psutil that no process it started survives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from airflow_tfk.backends import get_backend
from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend, default_root
from airflow_tfk.core import naming
from airflow_tfk.core.errors import LocalMachineError, SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.core.status import Phase
from airflow_tfk.run.policies import Outcome, evaluate, replicas_of, roles_after_success
from airflow_tfk.spec.cluster import RoleSpec, StorageSpec, TFClusterSpec, VolumeSpec
from tests.helpers import local_backend, wait_for

pytestmark = pytest.mark.timeout(60)

TASK = str(Path(__file__).parents[1] / "tasks" / "task.py")

FAST = {"kill_grace_seconds": 1.0, "restart_backoff_seconds": 0.05, "poll_interval": 0.05}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class Recorder:
    """What the task scripts wrote about themselves, plus what the backend recorded."""

    def __init__(self, path: Path, root: Path) -> None:
        self.path = path
        self.root = root

    def records(self, name: str | None = None) -> list[dict]:
        out = []
        for f in sorted(glob.glob(str(self.path / f"{name or '*'}.*.json"))):
            with open(f) as fh:
                out.append(json.load(fh))
        return out

    def pids(self, name: str | None = None) -> set[int]:
        """Every pid ever started: tasks, their supervisors, their grandchildren - from the
        tasks' own records and from the backend's files (supervisor.json, status.json)."""
        pids: set[int] = set()
        for r in self.records(name):
            pids |= {r["pid"], r["ppid"], *r["grandchildren"]}
        pattern = f"*/*/tasks/{name or '*'}"
        for tdir in glob.glob(str(self.root / pattern)):
            for fname, key in (("supervisor.json", "pid"), ("status.json", "pids")):
                try:
                    with open(os.path.join(tdir, fname)) as fh:
                        value = json.load(fh)[key]
                except FileNotFoundError:
                    continue
                pids |= set(value) if isinstance(value, list) else {value}
        return pids

    def assert_all_gone(self, name: str | None = None, timeout: float = 5.0) -> set[int]:
        pids = self.pids(name)
        assert pids, "no process was recorded"
        deadline = time.monotonic() + timeout
        while True:
            left = sorted(p for p in pids if alive(p))
            if not left:
                return pids
            if time.monotonic() > deadline:
                raise AssertionError(f"processes survived: {left}")
            time.sleep(0.02)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "tfk-local"


@pytest.fixture
def recorder(tmp_path: Path, root: Path) -> Recorder:
    path = tmp_path / "records"
    path.mkdir()
    return Recorder(path, root)


@pytest.fixture
def backend(root: Path, tmp_path: Path) -> Iterator[LocalBackend]:
    # Whatever a test left running dies here, and must leave no process behind.
    yield from local_backend(root, tmp_path, **FAST)


@pytest.fixture
def make_spec(recorder: Recorder) -> Callable[..., TFClusterSpec]:
    def make(
        name: str = "train",
        *,
        ps: dict | None = None,
        worker: dict | None = None,
        chief: dict | None = None,
        evaluator: dict | None = None,
        env: dict | None = None,
        **kwargs,
    ) -> TFClusterSpec:
        def role(d: dict | None) -> RoleSpec | None:
            if d is None:
                return None
            d = dict(d)
            behavior = d.pop("behavior", None)
            env = dict(d.pop("env", {}))
            if behavior is not None:
                if isinstance(behavior, dict):  # per index
                    env.update({f"BEHAVIOR_{i}": b for i, b in behavior.items()})
                else:
                    env["BEHAVIOR"] = behavior
            return RoleSpec(env=env, **d)

        return TFClusterSpec(
            name=name,
            image="local/unused:1",
            command=("python", TASK),
            ps=role(ps),
            worker=role(worker or {"replicas": 1}),
            chief=role(chief),
            evaluator=role(evaluator),
            env={"TEST_RECORD_DIR": str(recorder.path), **(env or {})},
            **kwargs,
        )

    return make


IDENTITY = RunIdentity("dag", "train", "manual__2026-01-01", -1)


def verdict(backend, spec, ref):
    return evaluate(spec.mode, replicas_of(spec), backend.status(ref))


def wait_outcome(backend, spec, ref, outcome, timeout=15.0):
    def check():
        v = verdict(backend, spec, ref)
        if v.outcome is not outcome and v.outcome is not Outcome.RUNNING:
            raise AssertionError(f"expected {outcome}, got {v} ({backend.status(ref).summary()})")
        return v.outcome is outcome and v

    return wait_for(check, timeout, f"{outcome}")


def phases(status):
    return {t.name: t.phase for t in status.tasks}


def processes_under(root: Path) -> list[int]:
    """Processes whose command line mentions the backend's root (supervisors)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(root) in part for part in p.info["cmdline"] or ()):
                out.append(p.pid)
        except psutil.Error:
            pass
    return [p for p in out if alive(p)]


# -- configuration -----------------------------------------------------------------------
def test_config_rebuilds_an_equivalent_backend(tmp_path, monkeypatch):
    b = LocalBackend(str(tmp_path / "r"), fixed_ports=True, kill_grace_seconds=2)
    again = get_backend("local", **b.config())
    assert isinstance(again, LocalBackend) and again.config() == b.config()
    assert b.kind == "local"
    monkeypatch.setenv("TFK_LOCAL_ROOT", str(tmp_path / "env-root"))
    assert LocalBackend().root == str(tmp_path / "env-root") == default_root()
    monkeypatch.delenv("TFK_LOCAL_ROOT")
    # the checkout's, as `airflow-tfk airflow` uses (tests/core/test_local_env.py)
    assert LocalBackend().root == str(Path(__file__).resolve().parents[3] / ".tfk-local")


# -- the environment contract -----------------------------------------------------------
def test_every_task_gets_the_kubernetes_env_contract(backend, make_spec, recorder, root):
    spec = make_spec(
        "envtest",
        mode="parameter_server",
        chief={"behavior": "exit:0"},
        ps={"replicas": 2, "behavior": "sleep"},
        worker={"replicas": 2, "behavior": "sleep", "env": {"ROLE_VAR": "w"}},
        evaluator={"behavior": "exit:0"},
        env={"CLUSTER_VAR": "c"},
        legacy_tf1_flags=True,
        storage=StorageSpec(data=VolumeSpec(size="1Gi"), models=VolumeSpec(claim="shared")),
    )
    ref = backend.create(spec, IDENTITY)
    assert ref == ClusterRef("envtest", "default")
    wait_for(
        lambda: len({r["env"]["TFK_ROLE"] + r["env"]["TFK_INDEX"] for r in recorder.records()}) == 6,
        what="6 tasks to start",
    )

    cluster = None
    ports = set()
    for r in recorder.records():
        env = r["env"]
        role, index = env["TFK_ROLE"], int(env["TFK_INDEX"])
        tf_config = json.loads(env["TF_CONFIG"])
        cluster = json.loads(env["TFK_CLUSTER"])
        assert tf_config == {"cluster": cluster, "task": {"type": role, "index": index}}
        assert set(cluster) == {"chief", "ps", "worker"}  # no evaluator in the map
        assert [len(cluster[k]) for k in ("chief", "ps", "worker")] == [1, 2, 2]
        assert env["TFK_MODE"] == "parameter_server"
        assert env["TFK_CLUSTER_NAME"] == "envtest"
        assert env["CLUSTER_VAR"] == "c"
        assert env.get("ROLE_VAR") == ("w" if role == "worker" else None)
        assert env["PYTHONUNBUFFERED"] == "1"
        assert Path(env["TFK_DATA_DIR"]).is_dir()
        assert Path(env["TFK_MODEL_DIR"]).is_dir()
        assert Path(env["TFK_MODEL_DIR"]) == backend.claim_path("default", "shared")
        assert backend.claim_path("default", "shared") == root / "default" / ".claims" / "shared"
        assert "TFK_LOG_DIR" not in env  # the spec has no logs volume
        assert os.path.realpath(r["executable"]) == os.path.realpath(sys.executable)
        assert r["argv"][1:] == [
            f"--ps_hosts={','.join(cluster['ps'])}",
            f"--worker_hosts={','.join(cluster['worker'])}",
            f"--job_name={role}",
            f"--task_index={index}",
        ]
        if role != "evaluator":
            assert cluster[role][index].startswith("127.0.0.1:")
    for addrs in cluster.values():
        ports |= {a.rsplit(":", 1)[1] for a in addrs}
    assert len(ports) == 5  # one distinct port per task of the map

    # parameter_server: the chief's success is the training's; workers and PS go after.
    wait_outcome(backend, spec, ref, Outcome.SUCCEEDED)
    leftover = roles_after_success(spec.mode, list(spec.roles()))
    assert set(leftover) == {"ps", "worker", "evaluator"}
    backend.delete_roles(ref, leftover)
    status = backend.status(ref)
    for t in status.of_role("ps") + status.of_role("worker"):
        assert (t.phase, t.reason) == (Phase.PENDING, "Deleted")
    assert status.task("chief", 0).phase is Phase.SUCCEEDED
    assert status.task("chief", 0).reason == "Completed"
    assert verdict(backend, spec, ref).outcome is Outcome.SUCCEEDED
    recorder.assert_all_gone()


# -- success paths -----------------------------------------------------------------------
def test_between_graph_success_then_ps_cleanup_then_delete(backend, make_spec, recorder, root):
    spec = make_spec(
        "bg",
        ps={"replicas": 2, "behavior": "listen,spawn,sleep"},
        worker={"replicas": 3, "behavior": "connect:ps,exit:0"},
    )
    ref = backend.create(spec, IDENTITY)
    v = wait_outcome(backend, spec, ref, Outcome.SUCCEEDED)
    assert v.outcome is Outcome.SUCCEEDED
    status = backend.status(ref)
    assert [t.phase for t in status.of_role("ps")] == [Phase.RUNNING] * 2  # PS never exit
    assert all(t.exit_code == 0 for t in status.of_role("worker"))
    assert "reached every ps" in backend.logs(ref, "worker", 0)

    ps_pids = recorder.pids("ps-*")
    assert len(ps_pids) == 6  # 2 x (supervisor, task, grandchild)
    backend.delete_roles(ref, roles_after_success(spec.mode, list(spec.roles())))
    assert not [p for p in ps_pids if alive(p)]  # gone when delete_roles returns
    assert verdict(backend, spec, ref).outcome is Outcome.SUCCEEDED
    assert {t.reason for t in backend.status(ref).of_role("ps")} == {"Deleted"}
    backend.delete_roles(ref, ["ps"])  # idempotent

    backend.delete(ref)
    backend.delete(ref)  # idempotent
    assert not backend.exists(ref)
    assert backend.status(ref).exists is False
    assert evaluate(spec.mode, replicas_of(spec), backend.status(ref)).outcome is Outcome.FAILED
    assert "task ps-0 starting" in backend.logs(ref, "ps", 0)  # logs kept for debugging
    recorder.assert_all_gone()
    assert not processes_under(root)


def test_all_reduce_success_with_fixed_ports(root, tmp_path, make_spec, recorder):
    backend = LocalBackend(str(root), workdir=str(tmp_path), fixed_ports=True, kill_grace_seconds=1)
    with socket.socket() as s:  # a free base port with room after it
        s.bind(("127.0.0.1", 0))
        base = s.getsockname()[1]
    base = min(base, 65000)
    spec = make_spec(
        "ar",
        mode="all_reduce",
        port=base,
        worker={"replicas": 3, "behavior": "listen,connect:worker,sleep:2,exit:0"},
    )
    ref = backend.create(spec)
    wait_outcome(backend, spec, ref, Outcome.SUCCEEDED)
    cluster = json.loads(recorder.records("worker-0")[0]["env"]["TFK_CLUSTER"])
    assert cluster == {"worker": [f"127.0.0.1:{base + k}" for k in range(3)]}
    backend.delete(ref)
    recorder.assert_all_gone()


# -- failures ----------------------------------------------------------------------------
def test_task_failing_at_once_fails_the_training_with_its_last_log_lines(backend, make_spec, recorder):
    spec = make_spec(
        "fail",
        ps={"behavior": "spawn,sleep"},
        worker={"replicas": 2, "behavior": {0: "sleep", 1: "print:30,exit:3"}},
    )
    ref = backend.create(spec, IDENTITY)
    v = wait_outcome(backend, spec, ref, Outcome.FAILED)
    assert v.failed_task.name == "worker-1"
    assert (v.failed_task.reason, v.failed_task.exit_code) == ("ExitCode", 3)
    assert "worker-1" in v.message and "exit code 3" in v.message
    lines = v.failed_task.message.splitlines()
    assert lines[-1] == f"(full log: {backend.log_path(ref, 'worker', 1)})"
    lines = lines[:-1]
    assert len(lines) == 20 and lines[-1] == "task worker-1 exiting with 3"
    assert "line 30" in lines and "line 10" not in lines
    # the failure ends no other task: the sleeping worker runs (it may start only now on a
    # loaded machine) until the failure cleanup
    wait_for(lambda: backend.status(ref).task("worker", 0).phase is Phase.RUNNING, what="worker-0 running")
    backend.delete(ref)  # failure cleanup
    recorder.assert_all_gone()


def test_missing_command_is_a_machine_error_and_nothing_is_created(backend, make_spec, root, tmp_path):
    """Not a SpecError: the same spec may run on Kubernetes, where the image has it."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    cases = [
        (
            dataclasses.replace(make_spec("nocmd", ps={}), command=("tfk-no-such-program",)),
            "command",
            "tfk-no-such-program",
        ),
        (
            make_spec("nocmd", ps={}, worker={"command": ("./missing-binary",)}),
            "worker.command",
            "./missing-binary",
        ),
        (
            make_spec("nocmd", ps={}, worker={"args": ("missing_script.py",), "command": ("python",)}),
            "worker.args[0]",
            "missing_script.py",
        ),
        (
            dataclasses.replace(make_spec("nocmd", ps={}), command=("python", "nope.py")),
            "command[1]",
            "nope.py",
        ),
    ]
    for spec, field, named in cases:
        with pytest.raises(LocalMachineError) as err:
            backend.create(spec, IDENTITY)
        assert err.value.field == field and f"{named!r}" in err.value.rule, err.value
        assert not isinstance(err.value, SpecError)
    assert not (root / "default" / "nocmd").exists()
    assert not backend.exists(ClusterRef("nocmd", "default"))
    assert {p.pid for p in psutil.Process().children(recursive=True)} == before
    assert not processes_under(root)


@contextlib.contextmanager
def _busy_port_after_a_free_one() -> Iterator[int]:
    """A port this test listens on whose predecessor is free now (CI once found the port
    before an ephemeral one taken by another process, and the error rightly named it)."""
    for _ in range(50):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            port = busy.getsockname()[1]
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port - 1))
                except OSError:
                    continue
            yield port
            return
    raise AssertionError("no free port before a busy one in 50 tries")


def test_taken_fixed_port_is_a_clear_machine_error(root, tmp_path, make_spec):
    backend = LocalBackend(str(root), workdir=str(tmp_path), fixed_ports=True)
    with _busy_port_after_a_free_one() as port:
        spec = make_spec("ports", ps={"behavior": "sleep"}, port=port - 1, worker={"replicas": 2})
        with pytest.raises(LocalMachineError) as err:
            backend.create(spec)
    assert err.value.field == "port" and err.value.value == port
    assert f"127.0.0.1:{port} (for task worker-0) is already in use" in str(err.value)
    assert not (root / "default" / "ports").exists()
    assert not processes_under(root)


def test_retries_and_permanent_exit_codes(backend, make_spec, recorder):
    spec = make_spec(
        "retry",
        mode="all_reduce",
        retries_per_index=2,
        permanent_exit_codes=(1,),
        worker={"replicas": 3, "behavior": {0: "flaky:2/3,exit:0", 1: "exit:1", 2: "exit:4"}},
    )
    ref = backend.create(spec)
    wait_for(
        lambda: all(t.phase in (Phase.SUCCEEDED, Phase.FAILED) for t in backend.status(ref).tasks),
        what="every task to end",
    )
    w0, w1, w2 = backend.status(ref).of_role("worker")
    assert (w0.phase, w0.restarts, w0.exit_code) == (Phase.SUCCEEDED, 2, 0)
    assert (w1.phase, w1.restarts, w1.exit_code) == (Phase.FAILED, 0, 1)  # permanent
    assert (w2.phase, w2.restarts, w2.exit_code) == (Phase.FAILED, 2, 4)  # retries used up
    log0 = backend.logs(ref, "worker", 0)
    assert log0.count("task worker-0 starting") == 3 and "attempt 3: ok" in log0
    assert backend.logs(ref, "worker", 0, tail_lines=1) == "task worker-0 exiting with 0\n"
    assert verdict(backend, spec, ref).failed_task.name == "worker-1"
    assert len(recorder.records("worker-0")) == 3
    recorder.assert_all_gone()  # every attempt's process is gone, without any delete

    # A finished (not deleted) cluster is replaced by a re-create, not reattached.
    uid = json.loads((backend.cluster_dir(ref) / "state.json").read_text())["uid"]
    assert backend.create(spec) == ref
    assert json.loads((backend.cluster_dir(ref) / "state.json").read_text())["uid"] != uid
    wait_for(lambda: backend.status(ref).task("worker", 0).phase is Phase.SUCCEEDED)
    assert backend.logs(ref, "worker", 0).count("starting") == 1  # a fresh log
    backend.delete(ref)


def test_max_duration_kills_every_task(backend, make_spec, recorder):
    spec = make_spec(
        "deadline",
        max_duration_seconds=1,
        ps={"behavior": "spawn,sleep"},
        worker={"replicas": 2, "behavior": {0: "sleep", 1: "ignore_term,sleep"}},
    )
    ref = backend.create(spec, IDENTITY)
    wait_for(
        lambda: all(t.phase is Phase.FAILED for t in backend.status(ref).tasks),
        timeout=10,
        what="every task killed at the deadline",
    )
    status = backend.status(ref)
    assert {t.reason for t in status.tasks} == {"DeadlineExceeded"}
    assert status.task("worker", 1).exit_code == 128 + 9  # ignored SIGTERM: SIGKILLed
    assert status.task("worker", 0).exit_code == 128 + 15
    v = verdict(backend, spec, ref)
    assert v.outcome is Outcome.FAILED and "DeadlineExceeded" in v.message
    recorder.assert_all_gone()  # the deadline alone cleaned up, no delete needed
    backend.delete(ref)


# -- across processes --------------------------------------------------------------------
def _in_subprocess(code: str, backend: LocalBackend, *args: str) -> str:
    script = (
        "import json, sys\n"
        "from airflow_tfk.backends import get_backend\n"
        "from airflow_tfk.backends.base import ClusterRef\n"
        "from airflow_tfk.spec.cluster import TFClusterSpec\n"
        "from airflow_tfk.core.naming import RunIdentity\n"
        f"backend = get_backend('local', **json.loads({json.dumps(backend.config())!r}))\n" + code
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=str(Path(__file__).parents[3]),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cluster_outlives_its_creator_reattaches_and_is_killed_from_another_process(
    backend, make_spec, recorder, root
):
    spec = make_spec("xproc", ps={"behavior": "spawn,sleep"}, worker={"replicas": 2, "behavior": "sleep"})
    # Created by a process that then exits (an Airflow task that ended or was killed).
    out = _in_subprocess(
        "spec = TFClusterSpec.from_dict(json.loads(sys.argv[1]))\n"
        "ref = backend.create(spec, RunIdentity.from_dict(json.loads(sys.argv[2])))\n"
        "print(json.dumps(ref.to_dict()))\n",
        backend,
        json.dumps(spec.to_dict()),
        json.dumps(IDENTITY.to_dict()),
    )
    ref = ClusterRef.from_dict(json.loads(out))
    wait_for(
        lambda: all(t.phase is Phase.RUNNING for t in backend.status(ref).tasks), what="every task running"
    )

    # Another process's view is the same.
    seen = json.loads(
        _in_subprocess(
            "print(json.dumps(backend.status(ClusterRef.from_dict(json.loads(sys.argv[1]))).to_dict()))\n",
            backend,
            json.dumps(ref.to_dict()),
        )
    )
    assert seen == backend.status(ref).to_dict()

    # A retried task re-creates: it reattaches and starts nothing.
    pids = recorder.pids()
    assert backend.create(spec, IDENTITY) == ref
    assert get_backend("local", **backend.config()).create(spec, IDENTITY) == ref
    assert recorder.pids() == pids
    # ...but another run must not take over a live cluster of the same name.
    with pytest.raises(SpecError, match="belongs to dag 'dag', task 'train', run 'manual__2026-01-01'"):
        backend.create(spec, RunIdentity("dag", "train", "other-run"))

    # Killed from a third process (e.g. on_kill of the Airflow task).
    _in_subprocess(
        "backend.delete(ClusterRef.from_dict(json.loads(sys.argv[1])))\n", backend, json.dumps(ref.to_dict())
    )
    assert not backend.exists(ref)
    recorder.assert_all_gone(timeout=1)
    assert not processes_under(root)

    # Re-created after the delete: a fresh cluster; the old one moved to .history.
    assert backend.create(spec, IDENTITY) == ref
    wait_for(
        lambda: backend.exists(ref) and all(t.phase is Phase.RUNNING for t in backend.status(ref).tasks),
        what="fresh cluster",
    )
    assert len(list((root / "default" / ".history").iterdir())) == 1
    backend.delete(ref)
    recorder.assert_all_gone()


def test_supervisor_killed_from_outside_is_reported_not_hidden(backend, make_spec, recorder):
    spec = make_spec("lost", mode="all_reduce", worker={"replicas": 1, "behavior": "sleep"})
    ref = backend.create(spec)
    wait_for(lambda: backend.status(ref).task("worker", 0).phase is Phase.RUNNING)
    sup = json.loads((backend.cluster_dir(ref) / "tasks/worker-0/supervisor.json").read_text())
    task_pid = wait_for(lambda: recorder.records("worker-0"))[0]["pid"]
    psutil.Process(sup["pid"]).kill()
    wait_for(lambda: not alive(sup["pid"]))
    assert backend.status(ref).task("worker", 0).phase is Phase.RUNNING  # the task still runs
    backend.delete(ref)  # still finds and kills the orphaned task
    assert not alive(task_pid)
    recorder.assert_all_gone()


def test_find_earlier_runs_and_delete_with_a_reason(backend, make_spec, recorder):
    spec_a = make_spec("run-a", mode="all_reduce", worker={"behavior": "sleep"})
    spec_b = make_spec("run-b", mode="all_reduce", worker={"behavior": "sleep"}, labels={"team": "ml"})
    a = backend.create(spec_a, RunIdentity("dag", "train", "r1"))
    b = backend.create(spec_b, RunIdentity("dag", "train", "r2"))
    labels = {naming.LABEL_DAG: "dag", naming.LABEL_TASK: "train"}
    assert backend.find("default", labels) == [a, b]
    assert backend.find(None, {**labels, naming.LABEL_RUN: "r2"}) == [b]
    assert backend.find(None, {"team": "ml", naming.LABEL_CLUSTER: "run-b"}) == [b]
    assert backend.find("elsewhere", labels) == []
    backend.delete(a, "killed by the newer run r2")
    assert backend.find("default", labels) == [b]
    status = backend.status(a)
    assert not status.exists and status.deleted_reason == "killed by the newer run r2"
    assert "killed by the newer run r2" in verdict(backend, spec_a, a).message
    backend.delete(b)
    recorder.assert_all_gone()


def test_missing_workdir_is_a_machine_error_naming_it(root, tmp_path, make_spec):
    gone = tmp_path / "no-such-dir"
    backend = LocalBackend(str(root), workdir=str(gone))
    with pytest.raises(LocalMachineError, match="^workdir: ") as err:
        backend.create(make_spec("nowd", ps={}))
    assert err.value.value == str(gone)
    assert not (root / "default" / "nowd").exists()
