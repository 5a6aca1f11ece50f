"""The local backend: a :class:`TFClusterSpec` run as processes on 127.0.0.1.

The embedded default for a first run, for developing a training app and for end-to-end
tests. Each task gets its own free port on 127.0.0.1 and the same environment as a pod on
Kubernetes (``TF_CONFIG``, ``TFK_CLUSTER`` - without the evaluator -, ``TFK_ROLE``,
``TFK_INDEX``, ``TFK_MODE``, ``TFK_CLUSTER_NAME``, the spec's env and the role's env, and
``TFK_DATA_DIR``/``TFK_LOG_DIR``/``TFK_MODEL_DIR`` for the volumes the spec has), and runs
under a small supervisor process (``_local_supervisor.py``) in its own session, which
plays the pod and the Job: it records the exit code, restarts the task up to
``spec.retries_per_index`` times unless the exit code is permanent, and kills it past
``spec.max_duration_seconds`` (``DeadlineExceeded``).

All state lives on disk, so one process may create a cluster, another watch it, and a
third delete it (Airflow task, triggerer, retry)::

    <root>/<namespace>/<name>/
        state.json                  the cluster: spec, identity, ports, supervisors (atomic)
        logs/<role>-<index>.log     stdout+stderr of each task, every attempt (kept on delete)
        tasks/<role>-<index>/       task.json (argv, env, policy), supervisor.json,
                                    status.json (current attempt), exit.json (final exit
                                    status), supervisor.log, deleted (marker)
        volumes/{data,logs,models}/ stand-ins for the PVCs the spec asks for
    <root>/<namespace>/.claims/<claim>/    stand-in for an existing PVC (``claim:``), shared
    <root>/<namespace>/.history/<name>-*/  clusters replaced by a re-create (last few kept)
    <root>/<namespace>/.locks/<name>.lock  serialises create/delete across processes

``root`` defaults to ``$TFK_LOCAL_ROOT``, else ``~/.tfk-local``.

Status follows the Kubernetes model: ``Pending`` (starting, or waiting to be restarted:
reason ``BackOff``), ``Running``, ``Succeeded`` (reason ``Completed``), ``Failed`` (reason
``ExitCode`` with the exit code - ``128 + N`` when killed by signal N -, ``DeadlineExceeded``,
``StartError``, or ``Lost`` when the supervisor vanished), with the task's last log lines
as the message. A task deleted (``delete_roles``/``delete``) before it exited is ``Pending``
with reason ``Deleted``: not a failure, so deleting the PS after success keeps the
training successful; a task that had already exited keeps its outcome.

POSIX only (process groups and sessions).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from airflow_tfk import _process, naming
from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.errors import SpecError
from airflow_tfk.naming import RunIdentity
from airflow_tfk.spec import ROLES, RoleSpec, TFClusterSpec
from airflow_tfk.status import ClusterStatus, Phase, TaskStatus

log = logging.getLogger(__name__)

SUPERVISOR = str(Path(__file__).with_name("_local_supervisor.py"))
LOCALHOST = "127.0.0.1"
FAILURE_LOG_LINES = 20
STATE_VERSION = 1
_PYTHONS = ("python", "python3")
_VOLUME_ENV = {"data": "TFK_DATA_DIR", "logs": "TFK_LOG_DIR", "models": "TFK_MODEL_DIR"}
_CTIME_TOLERANCE = 1.0  # seconds; psutil create times of one process agree far better


def default_root() -> str:
    return os.environ.get("TFK_LOCAL_ROOT") or os.path.join(os.path.expanduser("~"), ".tfk-local")


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` so readers in other processes see the old or the new file, never half."""
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}.{uuid.uuid4().hex[:6]}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except ValueError:  # only a crash mid-write of a non-atomic writer could do this
        log.warning("local backend: ignoring unreadable %s", path)
        return None


def _tail(path: Path, lines: int | None) -> str:
    """The last ``lines`` lines of a file (all of it for None), '' when it does not exist."""
    try:
        with open(path, "rb") as fh:
            if lines is None:
                data = fh.read()
            else:
                if lines <= 0:
                    return ""
                fh.seek(0, os.SEEK_END)
                pos = fh.tell()
                data = b""
                while pos > 0 and data.count(b"\n") <= lines:
                    step = min(64 * 1024, pos)
                    pos -= step
                    fh.seek(pos)
                    data = fh.read(step) + data
                data = b"\n".join(data.rstrip(b"\n").split(b"\n")[-lines:])
                if data:
                    data += b"\n"
    except FileNotFoundError:
        return ""
    return data.decode("utf-8", errors="replace")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR so a TIME_WAIT leftover is not mistaken for a listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOCALHOST, port))
            sock.listen(1)
        except OSError:
            return False
    return True


def _verified(pid: int | None, create_time: float | None) -> psutil.Process | None:
    return _process.verified(pid, create_time, _CTIME_TOLERANCE)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until the processes ended; the ones still running after ``timeout``.

    A zombie counts as ended: it runs nothing, and its parent (init, for the daemonized
    supervisors) reaps it when it gets to it - psutil.wait_procs would wait for that too.
    """
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        procs = [p for p in procs if _running(p)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


class LocalBackend(Backend):
    """Runs clusters as local processes; see the module docstring for the on-disk layout.

    :param root: directory of every cluster's state (default ``$TFK_LOCAL_ROOT``, else
        ``~/.tfk-local``).
    :param fixed_ports: when True, task *k* of the cluster map (chief, ps, workers in
        order) listens on ``spec.port + k`` and :meth:`create` fails with a
        :class:`SpecError` on ``port`` if one is taken; by default free ports are picked.
    :param workdir: working directory of the tasks (default: the directory
        :meth:`create` is called from); relative script paths resolve against it.
    :param kill_grace_seconds: SIGTERM-to-SIGKILL grace when deleting or timing out tasks.
    :param restart_backoff_seconds: first delay before a restart, doubled each retry.
    :param poll_interval: seconds between two status polls in :meth:`watch`.
    :param inherit_env: tasks start from this process's environment (minus ``TF_CONFIG``
        and ``TFK_*``), like a developer's shell; False gives them only PATH, HOME, LANG.
    :param keep_history: replaced clusters (logs, volumes) kept under ``.history``.
    :param start_timeout_seconds: how long :meth:`create` waits for the supervisors.
    """

    kind = "local"

    def __init__(
        self,
        root: str | None = None,
        *,
        fixed_ports: bool = False,
        workdir: str | None = None,
        kill_grace_seconds: float = 5.0,
        restart_backoff_seconds: float = 1.0,
        poll_interval: float = 0.5,
        inherit_env: bool = True,
        keep_history: int = 3,
        start_timeout_seconds: float = 30.0,
    ) -> None:
        if os.name != "posix":
            raise RuntimeError("the local backend needs a POSIX system (process groups)")
        self.root = os.path.abspath(os.path.expanduser(root or default_root()))
        self.fixed_ports = bool(fixed_ports)
        self.workdir = os.path.abspath(workdir) if workdir else None
        self.kill_grace_seconds = float(kill_grace_seconds)
        self.restart_backoff_seconds = float(restart_backoff_seconds)
        self.poll_interval = float(poll_interval)
        self.inherit_env = bool(inherit_env)
        self.keep_history = int(keep_history)
        self.start_timeout_seconds = float(start_timeout_seconds)

    def __repr__(self) -> str:
        return f"LocalBackend(root={self.root!r})"

    def config(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "fixed_ports": self.fixed_ports,
            "workdir": self.workdir,
            "kill_grace_seconds": self.kill_grace_seconds,
            "restart_backoff_seconds": self.restart_backoff_seconds,
            "poll_interval": self.poll_interval,
            "inherit_env": self.inherit_env,
            "keep_history": self.keep_history,
            "start_timeout_seconds": self.start_timeout_seconds,
        }

    # -- paths --------------------------------------------------------------------------
    def cluster_dir(self, ref: ClusterRef) -> Path:
        """``<root>/<namespace>/<name>``: where the cluster's state and logs are."""
        if not naming.is_dns1123_label(ref.namespace) or not naming.is_dns1035_label(ref.name):
            raise ValueError(f"not a cluster reference: {ref!r}")
        return Path(self.root, ref.namespace, ref.name)

    def claim_path(self, namespace: str, claim: str) -> Path:
        """The directory standing in for the existing PVC ``claim`` (``storage.*.claim``):
        shared by every cluster of the namespace and never deleted, like the PVC."""
        if not naming.is_dns1123_label(namespace) or not naming.is_dns1123_subdomain(claim):
            raise ValueError(f"not a namespace and claim name: {namespace!r}, {claim!r}")
        return Path(self.root, namespace, ".claims", claim)

    def log_path(self, ref: ClusterRef, role: str, index: int) -> Path:
        return self.cluster_dir(ref) / "logs" / f"{role}-{int(index)}.log"

    def _task_dir(self, ref: ClusterRef, role: str, index: int) -> Path:
        return self.cluster_dir(ref) / "tasks" / f"{role}-{int(index)}"

    @contextlib.contextmanager
    def _locked(self, ref: ClusterRef) -> Iterator[None]:
        import fcntl

        lock_dir = Path(self.root, ref.namespace, ".locks")
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / f"{ref.name}.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _state(self, ref: ClusterRef) -> dict[str, Any] | None:
        return _read_json(self.cluster_dir(ref) / "state.json")

    # -- create -------------------------------------------------------------------------
    def create(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> ClusterRef:
        """Start every task; a live cluster of the same name is reattached, not restarted.

        A cluster that was deleted or whose processes all ended is replaced (its directory
        moves to ``.history``). Raises :class:`SpecError` - with nothing created - when the
        command cannot run here or a fixed port is taken.
        """
        ref = ClusterRef(name=spec.name, namespace=spec.namespace_name)
        cdir = self.cluster_dir(ref)
        workdir = self.workdir or os.getcwd()
        commands = self._resolve_commands(spec, workdir)  # SpecError before any side effect
        with self._locked(ref):
            state = self._state(ref)
            if state is not None and not state.get("deleted_at") and self._live(ref, state):
                self._check_reattach(ref, state, spec, identity)
                log.info("local backend: cluster %s/%s is running; reattached", ref.namespace, ref.name)
                return ref
            # Say what differs from a pod, once per cluster: nobody expects these silently.
            log.info(
                "local backend: ignoring image %s (tasks run on this machine with %s); "
                "working directory %s (relative paths in command and args resolve against it)",
                spec.image,
                ", ".join(sorted({argv[0] for argv in commands.values()})),
                workdir,
            )
            ports = self._allocate_ports(spec)
            if cdir.exists():
                self._archive(ref, state)
            try:
                self._start(ref, spec, identity, commands, ports, workdir)
            except BaseException:
                self._kill(ref, self._state(ref) or {"tasks": []}, None)
                shutil.rmtree(cdir, ignore_errors=True)
                raise
        return ref

    def _check_reattach(
        self, ref: ClusterRef, state: dict[str, Any], spec: TFClusterSpec, identity: RunIdentity | None
    ) -> None:
        owner = state.get("identity")
        if identity is not None and owner is not None and owner != identity.to_dict():
            raise SpecError(
                "name",
                f"a running local cluster {ref.namespace}/{ref.name} belongs to "
                f"another run ({RunIdentity.from_dict(owner)!r}); delete it first or "
                "choose another name",
                spec.name,
            )
        if state.get("spec") != spec.to_dict():
            log.warning(
                "local backend: %s/%s is already running with a different spec; the "
                "running cluster is kept (delete it to apply the new spec)",
                ref.namespace,
                ref.name,
            )

    def _resolve_commands(self, spec: TFClusterSpec, workdir: str) -> dict[str, list[str]]:
        """argv (without the legacy flags) of each role; checks what only this machine can."""
        if not os.path.isdir(workdir):
            raise SpecError("workdir", "the local backend's working directory does not exist", workdir)
        out: dict[str, list[str]] = {}
        for role, rspec in spec.roles().items():
            cmd_field = f"{role}.command" if rspec.command is not None else "command"
            args_field = f"{role}.args" if rspec.args is not None else "args"
            command = list(rspec.command if rspec.command is not None else spec.command)
            args = list(rspec.args if rspec.args is not None else spec.args)
            exe = command[0]
            path_env = rspec.env.get("PATH") or spec.env.get("PATH") or os.environ.get("PATH")
            is_python = exe in _PYTHONS
            if is_python:
                resolved = sys.executable
            elif "/" in exe:
                resolved = exe if os.path.isabs(exe) else os.path.join(workdir, exe)
                if not os.path.isfile(resolved):
                    raise SpecError(
                        cmd_field, f"executable {exe!r} does not exist (resolved against {workdir})", exe
                    )
                if not os.access(resolved, os.X_OK):
                    raise SpecError(cmd_field, f"{exe!r} is not executable", exe)
                is_python = os.path.basename(resolved).startswith("python")
            else:
                found = shutil.which(exe, path=path_env)
                if found is None:
                    raise SpecError(cmd_field, f"executable {exe!r} is not on PATH on this machine", exe)
                resolved = found
                is_python = exe.startswith("python")
            argv = [resolved, *command[1:], *args]
            if is_python:  # `python train.py`: the script must be here too
                script = argv[1] if len(argv) > 1 else None
                if script and script.endswith(".py") and not script.startswith("-"):
                    where = f"{cmd_field}[1]" if len(command) > 1 else f"{args_field}[0]"
                    full = script if os.path.isabs(script) else os.path.join(workdir, script)
                    if not os.path.isfile(full):
                        raise SpecError(
                            where, f"script {script!r} does not exist (resolved against {workdir})", script
                        )
            out[role] = argv
        return out

    def _allocate_ports(self, spec: TFClusterSpec) -> dict[str, int]:
        """One port per task of the cluster map (``role-index`` -> port)."""
        names = [f"{r}-{i}" for r, s in spec.cluster_roles().items() for i in range(s.replicas)]
        if self.fixed_ports:
            last = spec.port + len(names) - 1
            if last > 65535:
                raise SpecError(
                    "port",
                    f"with fixed ports the {len(names)} tasks need ports {spec.port}-{last}, beyond 65535",
                    spec.port,
                )
            for k, name in enumerate(names):
                if not _port_free(spec.port + k):
                    raise SpecError(
                        "port",
                        f"{LOCALHOST}:{spec.port + k} (for task {name}) is "
                        "already in use on this machine: stop what listens there, "
                        "choose another port, or let the local backend pick free "
                        "ports (fixed_ports=False)",
                        spec.port,
                    )
            return {name: spec.port + k for k, name in enumerate(names)}
        socks: list[socket.socket] = []
        try:  # hold every socket until all are bound, so no two tasks get the same port
            for _ in names:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.bind((LOCALHOST, 0))
            return {name: sock.getsockname()[1] for name, sock in zip(names, socks, strict=True)}
        finally:
            for sock in socks:
                sock.close()

    def _archive(self, ref: ClusterRef, state: dict[str, Any] | None) -> None:
        """Move a finished or deleted cluster aside (logs stay readable) before a re-create."""
        cdir = self.cluster_dir(ref)
        history = Path(self.root, ref.namespace, ".history")
        history.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime((state or {}).get("created_at", 0)))
        uid = (state or {}).get("uid", uuid.uuid4().hex)[:8]
        os.replace(cdir, history / f"{ref.name}-{stamp}-{uid}")
        old = sorted(
            (p for p in history.iterdir() if p.name.startswith(f"{ref.name}-")),
            key=lambda p: p.stat().st_mtime,
        )
        for p in old[: max(0, len(old) - self.keep_history)]:
            shutil.rmtree(p, ignore_errors=True)

    def _task_env(
        self,
        spec: TFClusterSpec,
        role: str,
        rspec: RoleSpec,
        index: int,
        cluster: dict[str, list[str]],
        volumes: dict[str, str],
    ) -> dict[str, str]:
        if self.inherit_env:
            env = {k: v for k, v in os.environ.items() if not (k.startswith("TFK_") or k == "TF_CONFIG")}
        else:
            env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR") if k in os.environ}
        env["PYTHONUNBUFFERED"] = "1"  # progress lines reach the log as they are printed
        env.update(spec.env)
        env.update(rspec.env)
        cluster_json = json.dumps(cluster, separators=(",", ":"))
        env.update(
            {
                "TFK_CLUSTER": cluster_json,
                "TFK_ROLE": role,
                "TFK_INDEX": str(index),
                "TFK_MODE": spec.mode.value,
                "TFK_CLUSTER_NAME": spec.name,
                "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": role, "index": index}}, separators=(",", ":")
                ),
            }
        )
        for vol, path in volumes.items():
            env[_VOLUME_ENV[vol]] = path
        return env

    def _start(
        self,
        ref: ClusterRef,
        spec: TFClusterSpec,
        identity: RunIdentity | None,
        commands: dict[str, list[str]],
        ports: dict[str, int],
        workdir: str,
    ) -> None:
        cdir = self.cluster_dir(ref)
        (cdir / "logs").mkdir(parents=True)
        volumes: dict[str, str] = {}
        for vol, vspec in spec.storage.volumes().items():
            vdir = self.claim_path(ref.namespace, vspec.claim) if vspec.claim else cdir / "volumes" / vol
            vdir.mkdir(parents=True, exist_ok=True)
            volumes[vol] = str(vdir)
        cluster = {
            role: [f"{LOCALHOST}:{ports[f'{role}-{i}']}" for i in range(rs.replicas)]
            for role, rs in spec.cluster_roles().items()
        }
        legacy = [
            f"--ps_hosts={','.join(cluster.get('ps', []))}",
            f"--worker_hosts={','.join(cluster.get('worker', []))}",
        ]
        created_at = time.time()
        deadline = created_at + spec.max_duration_seconds if spec.max_duration_seconds is not None else None
        tasks = []
        for role, rspec in spec.roles().items():
            for index in range(rspec.replicas):
                name = f"{role}-{index}"
                tdir = cdir / "tasks" / name
                tdir.mkdir(parents=True)
                argv = list(commands[role])
                if spec.legacy_tf1_flags:
                    argv += [*legacy, f"--job_name={role}", f"--task_index={index}"]
                _write_json(
                    tdir / "task.json",
                    {
                        "role": role,
                        "index": index,
                        "argv": argv,
                        "cwd": workdir,
                        "env": self._task_env(spec, role, rspec, index, cluster, volumes),
                        "log": str(cdir / "logs" / f"{name}.log"),
                        "retries": spec.retries_per_index,
                        "permanent_exit_codes": list(spec.permanent_exit_codes),
                        "max_duration_seconds": spec.max_duration_seconds,
                        "deadline": deadline,
                        "kill_grace_seconds": self.kill_grace_seconds,
                        "restart_backoff_seconds": self.restart_backoff_seconds,
                    },
                )
                (cdir / "logs" / f"{name}.log").touch()
                tasks.append({"role": role, "index": index, "port": ports.get(name), "supervisor": None})
        state = {
            "version": STATE_VERSION,
            "kind": self.kind,
            "uid": uuid.uuid4().hex,
            "name": ref.name,
            "namespace": ref.namespace,
            "created_at": created_at,
            "deleted_at": None,
            "deleted_reason": "",
            "spec": spec.to_dict(),
            "labels": self._labels(spec, identity),
            "identity": identity.to_dict() if identity is not None else None,
            "cluster": cluster,
            "volumes": volumes,
            "workdir": workdir,
            "tasks": tasks,
        }
        _write_json(cdir / "state.json", state)

        launchers = []
        for t in tasks:
            tdir = cdir / "tasks" / f"{t['role']}-{t['index']}"
            with open(tdir / "supervisor.log", "ab") as out:
                launchers.append(
                    subprocess.Popen(
                        [sys.executable, "-I", SUPERVISOR, "--daemonize", str(tdir)],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=out,
                        close_fds=True,
                        start_new_session=True,
                        cwd=str(tdir),
                    )
                )
        for t, p in zip(tasks, launchers, strict=True):  # each returns once its supervisor forked
            if p.wait(timeout=self.start_timeout_seconds) != 0:
                tdir = cdir / "tasks" / f"{t['role']}-{t['index']}"
                raise RuntimeError(
                    f"local backend: the supervisor of {t['role']}-{t['index']} failed to start "
                    f"(exit code {p.returncode}): "
                    f"{_tail(tdir / 'supervisor.log', 20).strip() or 'no output'}"
                )
        give_up = time.monotonic() + self.start_timeout_seconds
        for t in tasks:
            tdir = cdir / "tasks" / f"{t['role']}-{t['index']}"
            while True:
                info = _read_json(tdir / "supervisor.json")
                if info is not None:
                    break
                if time.monotonic() > give_up:
                    raise RuntimeError(
                        f"local backend: the supervisor of {t['role']}-{t['index']} did not "
                        f"start within {self.start_timeout_seconds:.0f}s: "
                        f"{_tail(tdir / 'supervisor.log', 20).strip() or 'no output'}"
                    )
                time.sleep(0.01)
            try:
                ctime = psutil.Process(info["pid"]).create_time()
            except psutil.Error:
                ctime = None  # already gone (e.g. the task failed at once): nothing to kill
            t["supervisor"] = {"pid": info["pid"], "create_time": ctime}
        _write_json(cdir / "state.json", state)
        log.info(
            "local backend: started %s/%s (%d tasks) under %s", ref.namespace, ref.name, len(tasks), cdir
        )

    @staticmethod
    def _labels(spec: TFClusterSpec, identity: RunIdentity | None) -> dict[str, str]:
        """The labels every Kubernetes object of this cluster would carry (for :meth:`find`)."""
        labels = {
            "app.kubernetes.io/name": "tensorflow",
            "app.kubernetes.io/instance": spec.name,
            "app.kubernetes.io/managed-by": naming.MANAGED_BY,
            naming.LABEL_CLUSTER: spec.name,
        }
        if identity is not None:
            labels.update(identity.labels())
        labels.update(spec.labels)
        return labels

    # -- processes ----------------------------------------------------------------------
    def _supervisor(self, ref: ClusterRef, task: dict[str, Any]) -> psutil.Process | None:
        sup = task.get("supervisor")
        if sup:
            if sup.get("create_time") is None:
                return None
            return _verified(sup["pid"], sup["create_time"])
        info = _read_json(self._task_dir(ref, task["role"], task["index"]) / "supervisor.json")
        if info is None:  # still launching (create holds the lock)
            return None
        proc = _verified(info["pid"], None)
        if proc is not None and abs(proc.create_time() - info["started_at"]) > 5:
            return None
        return proc

    def _child(self, ref: ClusterRef, task: dict[str, Any]) -> psutil.Process | None:
        st = _read_json(self._task_dir(ref, task["role"], task["index"]) / "status.json")
        if not st or st.get("state") != "running":
            return None
        return _verified(st.get("pid"), st.get("pid_create_time"))

    def _live(self, ref: ClusterRef, state: dict[str, Any]) -> bool:
        return any(
            self._supervisor(ref, t) is not None or self._child(ref, t) is not None for t in state["tasks"]
        )

    def _kill(self, ref: ClusterRef, state: dict[str, Any], roles: list[str] | None) -> None:
        """Stop the tasks of ``roles`` (all for None) and wait until none of their processes
        is left: SIGTERM to each process group, SIGKILL after the grace."""
        tasks = [t for t in state["tasks"] if roles is None or t["role"] in roles]
        grace = self.kill_grace_seconds
        for t in tasks:
            tdir = self._task_dir(ref, t["role"], t["index"])
            if tdir.is_dir() and not (tdir / "deleted").exists():
                _write_json(tdir / "deleted", {"deleted_at": time.time()})
            task_cfg = _read_json(tdir / "task.json") or {}
            grace = max(grace, float(task_cfg.get("kill_grace_seconds", 0)))

        def targets() -> tuple[set[int], dict[int, psutil.Process]]:
            groups: set[int] = set()
            procs: dict[int, psutil.Process] = {}
            for t in tasks:
                for proc in (self._supervisor(ref, t), self._child(ref, t)):
                    if proc is None:
                        continue
                    groups.add(proc.pid)
                    procs[proc.pid] = proc
                    with contextlib.suppress(psutil.Error):
                        for c in proc.children(recursive=True):
                            procs[c.pid] = c
            return groups, procs

        def send(sig: int, groups: set[int], procs: dict[int, psutil.Process]) -> None:
            for pgid in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
            for proc in procs.values():
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)

        groups, procs = targets()
        if not procs:
            return
        # The supervisors stop their tasks themselves on SIGTERM (recording "Deleted"), with
        # their own grace; give them that long, plus a little, before SIGKILL.
        send(signal.SIGTERM, groups, procs)
        alive = _wait_gone(list(procs.values()), grace + 2.0)
        for _ in range(3):
            more_groups, more = targets()  # e.g. a restart that raced with the SIGTERM
            procs = {p.pid: p for p in alive} | more
            if not procs:
                return
            send(signal.SIGKILL, groups | more_groups, procs)
            alive = _wait_gone(list(procs.values()), 5.0)
            if not alive:
                groups = set()
        leftover = sorted(p.pid for p in alive)
        if leftover:
            raise RuntimeError(
                f"local backend: processes {leftover} of {ref.namespace}/{ref.name} did not die after SIGKILL"
            )

    # -- the Backend interface ----------------------------------------------------------
    def exists(self, ref: ClusterRef) -> bool:
        state = self._state(ref)
        return state is not None and not state.get("deleted_at")

    def status(self, ref: ClusterRef) -> ClusterStatus:
        state = self._state(ref)
        if state is None or state.get("deleted_at"):
            return ClusterStatus(
                tasks=(), exists=False, deleted_reason=(state or {}).get("deleted_reason") or ""
            )
        return ClusterStatus(tasks=tuple(self._task_status(ref, t) for t in state["tasks"]))

    def _task_status(self, ref: ClusterRef, task: dict[str, Any]) -> TaskStatus:
        role, index = task["role"], task["index"]
        tdir = self._task_dir(ref, role, index)
        log_path = self.log_path(ref, role, index)
        final = _read_json(tdir / "exit.json")
        current = _read_json(tdir / "status.json") or {}
        restarts = int((final or current).get("restarts", 0))
        deleted = (tdir / "deleted").exists()
        if final is not None and final.get("phase") != "Deleted":
            phase = Phase(final["phase"])
            message = ""
            if phase is Phase.FAILED:
                message = _tail(log_path, FAILURE_LOG_LINES).rstrip("\n") or final.get("message", "")
            return TaskStatus(
                role, index, phase, final.get("reason", ""), message, final.get("exit_code"), restarts
            )
        if final is not None or deleted:
            return TaskStatus(
                role,
                index,
                Phase.PENDING,
                "Deleted",
                "deleted before it finished",
                (final or {}).get("exit_code"),
                restarts,
            )
        supervisor = self._supervisor(ref, task)
        if supervisor is None and task.get("supervisor"):
            if (tdir / "exit.json").exists() or (tdir / "deleted").exists():
                return self._task_status(ref, task)  # it just finished: read again
            # Killed from outside (or the machine rebooted) without a word: if the task
            # itself still runs, it is running; otherwise it is lost.
            if self._child(ref, task) is not None:
                return TaskStatus(role, index, Phase.RUNNING, "", "", None, restarts)
            tail = _tail(log_path, FAILURE_LOG_LINES).rstrip("\n")
            note = (
                "the local supervisor of this task is gone without recording an exit "
                "status (killed from outside, or the machine restarted)"
            )
            return TaskStatus(
                role, index, Phase.FAILED, "Lost", f"{note}\n{tail}" if tail else note, None, restarts
            )
        state = current.get("state")
        if state == "running":
            return TaskStatus(role, index, Phase.RUNNING, "", "", None, restarts)
        if state == "backoff":
            code = current.get("last_exit_code")
            return TaskStatus(
                role, index, Phase.PENDING, "BackOff", f"exited with code {code}; restarting", code, restarts
            )
        return TaskStatus(role, index, Phase.PENDING, "Starting", "", None, restarts)

    def logs(self, ref: ClusterRef, role: str, index: int, tail_lines: int | None = None) -> str:
        return _tail(self.log_path(ref, role, index), tail_lines)

    def delete_roles(self, ref: ClusterRef, roles: list[str]) -> None:
        unknown = sorted(set(roles) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown role(s) {unknown}; roles are {', '.join(ROLES)}")
        if not roles:
            return
        with self._locked(ref):
            state = self._state(ref)
            if state is None:
                return
            self._kill(ref, state, list(roles))

    def delete(self, ref: ClusterRef, reason: str = "") -> None:
        """Stop every process of the cluster; its logs stay on disk, ``exists()`` turns False.

        ``reason`` is kept and reported as ``ClusterStatus.deleted_reason``.
        """
        if not self.cluster_dir(ref).exists():
            return
        with self._locked(ref):
            state = self._state(ref)
            if state is None:
                return
            self._kill(ref, state, None)
            if not state.get("deleted_at"):
                state["deleted_at"] = time.time()
                state["deleted_reason"] = reason
                _write_json(self.cluster_dir(ref) / "state.json", state)
        log.info(
            "local backend: deleted %s/%s%s (logs kept in %s)",
            ref.namespace,
            ref.name,
            f" ({reason})" if reason else "",
            self.cluster_dir(ref) / "logs",
        )

    def find(self, namespace: str | None, labels: dict[str, str]) -> list[ClusterRef]:
        """Clusters not deleted (running or finished) whose labels include ``labels``."""
        namespaces = (
            [namespace]
            if namespace is not None
            else sorted(p.name for p in Path(self.root).glob("*") if p.is_dir())
        )
        found = []
        for ns in namespaces:
            if not naming.is_dns1123_label(ns):
                continue
            for state_file in sorted(Path(self.root, ns).glob("*/state.json")):
                state = _read_json(state_file)
                if not state or state.get("deleted_at"):
                    continue
                have = state.get("labels") or {}
                if all(have.get(k) == v for k, v in labels.items()):
                    found.append(ClusterRef(name=state["name"], namespace=state["namespace"]))
        return found
