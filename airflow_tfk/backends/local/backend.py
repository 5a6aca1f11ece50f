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
        scratch/<role>-<index>/     the task's $TMPDIR (its pod's scratch emptyDir): emptied
                                    after each attempt, removed with the cluster's processes
        volumes/{data,logs,models}/ stand-ins for the PVCs the spec asks for
    <root>/<namespace>/.claims/<claim>/    stand-in for an existing PVC (``claim:``), shared
    <root>/<namespace>/.history/<name>-*/  clusters replaced by a re-create (last few kept)
    <root>/<namespace>/.locks/<name>.lock  serialises create/delete across processes

``root`` defaults to :func:`airflow_tfk.core.local_env.default_local_root` (``$TFK_LOCAL_ROOT``,
else the checkout's ``.tfk-local``, else ``~/.airflow-tfk/.tfk-local``).

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
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef
from airflow_tfk.backends.local import loopback as _local_loopback
from airflow_tfk.backends.local import pod as _local_pod
from airflow_tfk.backends.local import records as records
from airflow_tfk.backends.local.files import (
    DEFAULT_ENV_ALLOWLIST,
    _private_dir,
    _tail,
)
from airflow_tfk.backends.local.host import LocalHostChecks
from airflow_tfk.backends.local.procs import LocalProcesses
from airflow_tfk.backends.local.records import PRIVATE_FILE, ClusterState, SupervisorInfo, TaskEntry, TaskExit
from airflow_tfk.backends.local.start import LocalStart
from airflow_tfk.core import naming
from airflow_tfk.core.errors import ClusterOwnershipError, LocalMachineError
from airflow_tfk.core.kwargs import init_kwargs
from airflow_tfk.core.local_env import default_local_root as default_root
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.core.status import Activity, ClusterStatus
from airflow_tfk.core.usage import TaskUsage
from airflow_tfk.spec import capacity
from airflow_tfk.spec.cluster import ROLES, TFClusterSpec
from airflow_tfk.spec.operator_options import backend_options

log = logging.getLogger(__name__)


class LocalBackend(LocalProcesses, LocalHostChecks, LocalStart, Backend):
    """Runs clusters as local processes; see the module docstring for the on-disk layout.

    :param root: directory of every cluster's state (default
        :func:`airflow_tfk.core.local_env.default_local_root`).
    :param fixed_ports: when True, task *k* of the cluster map (chief, ps, workers in
        order) listens on ``spec.port + k`` and :meth:`create` fails with a
        :class:`LocalMachineError` on ``port``, naming it, if one is taken; by default
        free ports are picked.
    :param workdir: working directory of the tasks (default: the directory
        :meth:`create` is called from); relative script paths resolve against it.
    :param kill_grace_seconds: SIGTERM-to-SIGKILL grace when deleting or timing out tasks
        (default: the spec's ``termination_grace_seconds``, as a pod's grace period).
    :param restart_backoff_seconds: first delay before a restart, doubled each retry.
    :param poll_interval: seconds between two status polls in :meth:`watch`.
    :param env_allowlist: names of this process's environment variables a task inherits
        (default :data:`DEFAULT_ENV_ALLOWLIST`); nothing else, so no ``AIRFLOW_*`` secret
        reaches a training. The spec's ``env`` is the way to pass anything more.
    :param loopback_only: keep every listener of the tasks on 127.0.0.1 (see
        ``loopback``); False leaves TensorFlow's wildcard binds alone.
    :param inherit_env: tasks start from the allow-listed part of this environment (minus ``TF_CONFIG``
        and ``TFK_*``), like a developer's shell; False gives them only PATH, HOME, LANG.
    :param keep_history: replaced clusters (logs, volumes) kept under ``.history``.
    :param start_timeout_seconds: how long :meth:`create` waits for the supervisors.
    :param max_tasks: the most tasks (processes) one cluster may have here; a bigger spec
        fails before anything starts, naming the cap. Default: from this machine
        (:func:`airflow_tfk.spec.capacity.local_max_tasks`).
    """

    kind = "local"

    def __init__(
        self,
        root: str | None = None,
        *,
        fixed_ports: bool = False,
        workdir: str | None = None,
        kill_grace_seconds: float | None = None,
        restart_backoff_seconds: float = 1.0,
        poll_interval: float = 0.5,
        inherit_env: bool = True,
        env_allowlist: list[str] | tuple[str, ...] | None = None,
        loopback_only: bool = True,
        keep_history: int = 3,
        start_timeout_seconds: float = 30.0,
        max_tasks: int | None = None,
    ) -> None:
        if os.name != "posix":
            raise RuntimeError("the local backend needs a POSIX system (process groups)")
        # The operators check backend_config with the same table; a backend made directly
        # (the CLI, a test, a DAG's own code) gets the same refusals, naming the option.
        backend_options(
            self.kind,
            {
                "root": root,
                "fixed_ports": fixed_ports,
                "workdir": workdir,
                "kill_grace_seconds": kill_grace_seconds,
                "restart_backoff_seconds": restart_backoff_seconds,
                "poll_interval": poll_interval,
                "inherit_env": inherit_env,
                "env_allowlist": env_allowlist,
                "loopback_only": loopback_only,
                "keep_history": keep_history,
                "start_timeout_seconds": start_timeout_seconds,
            },
        )
        self.root = os.path.abspath(os.path.expanduser(root or default_root()))
        self.fixed_ports = bool(fixed_ports)
        self.workdir = os.path.abspath(workdir) if workdir else None
        self.kill_grace_seconds = None if kill_grace_seconds is None else float(kill_grace_seconds)
        self.restart_backoff_seconds = float(restart_backoff_seconds)
        self.poll_interval = float(poll_interval)
        self.inherit_env = bool(inherit_env)
        self.env_allowlist = tuple(DEFAULT_ENV_ALLOWLIST if env_allowlist is None else env_allowlist)
        self.loopback_only = bool(loopback_only)
        self.keep_history = int(keep_history)
        self.start_timeout_seconds = float(start_timeout_seconds)
        if max_tasks is None:
            max_tasks = capacity.local_max_tasks()
        if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
            raise LocalMachineError(
                "max_tasks", "must be a positive integer (local backend option)", max_tasks
            )
        self.max_tasks = max_tasks

    def __repr__(self) -> str:
        return f"LocalBackend(root={self.root!r})"

    def config(self) -> dict[str, Any]:
        return {**init_kwargs(self), "env_allowlist": list(self.env_allowlist)}

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

    def _remove_scratch(self, ref: ClusterRef, tasks: tuple[TaskEntry, ...] | None = None) -> None:
        """Remove the scratch directories of ``tasks`` (all for None), once their processes
        are gone: what a task killed without a word (SIGKILL: no atexit) left in its
        $TMPDIR, TensorFlow's autograph modules among it."""
        scratch = self.cluster_dir(ref) / "scratch"
        for path in [scratch] if tasks is None else [scratch / t.name for t in tasks]:
            shutil.rmtree(path, ignore_errors=True)

    @contextlib.contextmanager
    def _locked(self, ref: ClusterRef) -> Iterator[None]:
        import fcntl

        lock_dir = Path(self.root, ref.namespace, ".locks")
        _private_dir(lock_dir)
        fd = os.open(lock_dir / f"{ref.name}.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
        with open(fd, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _cluster(self, ref: ClusterRef) -> ClusterState | None:
        return records.read(self.cluster_dir(ref) / "state.json", ClusterState, self.root)

    def _tasks(self, ref: ClusterRef) -> tuple[TaskEntry, ...]:
        state = self._cluster(ref)
        return state.tasks if state is not None else ()

    # -- create -------------------------------------------------------------------------
    def _check_task_cap(self, spec: TFClusterSpec) -> None:
        # the checks of what this machine can run, before any side effect
        _local_pod.refuse_cluster_references(spec)
        too_big = capacity.check_local_tasks(spec, self.max_tasks)
        if too_big is not None:
            raise LocalMachineError(*too_big, spec.task_count())

    def preflight(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> None:
        self._check_task_cap(spec)
        self._resolve_commands(spec, self.workdir or os.getcwd())
        if self.fixed_ports:
            self._allocate_ports(spec)

    def create(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> ClusterRef:
        """Start every task; a live cluster of the same name is reattached, not restarted.

        A cluster that was deleted or whose processes all ended is replaced (its directory
        moves to ``.history``). Raises :class:`LocalMachineError` - with nothing created -
        when the command, a script or the working directory is missing here or a fixed
        port is taken.
        """
        ref = ClusterRef(name=spec.name, namespace=spec.namespace_name)
        cdir = self.cluster_dir(ref)
        workdir = self.workdir or os.getcwd()
        self._check_task_cap(spec)
        commands = self._resolve_commands(spec, workdir)  # errors before any side effect
        preload = _local_loopback.preload_library() if self.loopback_only else None
        with self._locked(ref):
            state = self._cluster(ref)
            if state is not None and not state.deleted_at and self._live(ref, state):
                self._check_reattach(ref, state, spec, identity)
                log.info("local backend: cluster %s/%s is running; reattached", ref.namespace, ref.name)
                return ref
            if state is None and self._marked(ref):
                raise LocalMachineError(
                    "name",
                    f"processes of an earlier local cluster {ref.namespace}/{ref.name} are still "
                    "running but its state is gone, so its owner is unknown; delete it first",
                    spec.name,
                )
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
                self._start(ref, spec, identity, commands, ports, workdir, preload)
            except BaseException:
                # A failed start (a full disk, a supervisor that did not come up) removes
                # all it made, even when stopping its processes fails: no record may stay
                # that looks like a cluster.
                try:
                    self._kill(ref, self._tasks(ref), None)
                finally:
                    shutil.rmtree(cdir, ignore_errors=True)
                raise
        return ref

    def _check_reattach(
        self, ref: ClusterRef, state: ClusterState, spec: TFClusterSpec, identity: RunIdentity | None
    ) -> None:
        """The backend's own guard (the lifecycle checks first): a running cluster is
        reattached only by its owner, and only with the spec it was made from."""
        owner = state.identity
        mine = identity.to_dict() if identity is not None else None
        if owner != mine:
            who = ClusterOwner(RunIdentity.from_dict(owner) if owner else None, None).describe()
            raise ClusterOwnershipError(
                spec.name,
                f"a running local cluster {ref.namespace}/{ref.name} belongs to {who}; "
                "delete it first or choose another name",
            )
        if state.spec != spec.to_dict():
            raise ClusterOwnershipError(
                spec.name,
                f"the running local cluster {ref.namespace}/{ref.name} was made from another "
                "spec; delete it first to apply this one",
            )

    def _archive(self, ref: ClusterRef, state: ClusterState | None) -> None:
        """Move a finished or deleted cluster aside (logs stay readable) before a re-create."""
        cdir = self.cluster_dir(ref)
        self._remove_scratch(ref)  # the processes are gone; history keeps logs and volumes
        history = Path(self.root, ref.namespace, ".history")
        _private_dir(history)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(state.created_at if state else 0))
        uid = (state.uid if state and state.uid else uuid.uuid4().hex)[:8]
        os.replace(cdir, history / f"{ref.name}-{stamp}-{uid}")
        old = sorted(
            (p for p in history.iterdir() if p.name.startswith(f"{ref.name}-")),
            key=lambda p: p.stat().st_mtime,
        )
        for p in old[: max(0, len(old) - self.keep_history)]:
            shutil.rmtree(p, ignore_errors=True)

    # -- the Backend interface ----------------------------------------------------------
    def owner(self, ref: ClusterRef) -> ClusterOwner | None:
        state = self._cluster(ref)
        if state is None or state.deleted_at:
            return None
        return ClusterOwner(
            RunIdentity.from_dict(state.identity) if state.identity else None,
            state.spec_hash,
            state.created_at,
            state.spec.get("max_duration_seconds"),
        )

    def exists(self, ref: ClusterRef) -> bool:
        state = self._cluster(ref)
        return state is not None and not state.deleted_at

    def status(self, ref: ClusterRef) -> ClusterStatus:
        state = self._cluster(ref)
        if state is None or state.deleted_at:
            return ClusterStatus(tasks=(), exists=False, deleted_reason=state.deleted_reason if state else "")
        return ClusterStatus(tasks=tuple(self._task_status(ref, t) for t in state.tasks))

    def logs(self, ref: ClusterRef, role: str, index: int, tail_lines: int | None = None) -> str:
        """The task's last ``tail_lines`` lines (None: its last :data:`MAX_LOG_READ_BYTES`),
        read as data: a log that is not a regular file under the root, reached without a
        symlink, is an :class:`~airflow_tfk.core.bounded_files.UnsafeFileError` naming it."""
        return _tail(self.log_path(ref, role, index), tail_lines, self.root)

    def task_activity(self, ref: ClusterRef, role: str, index: int) -> Activity:
        """When the task last wrote to its log (the file's mtime), and whether its process
        is stopped (SIGSTOP, a debugger): a frozen task, seen as a kubelet cannot."""
        try:
            last = self.log_path(ref, role, index).stat().st_mtime
        except OSError:
            last = None
        note = ""
        task = next((t for t in self._tasks(ref) if (t.role, t.index) == (role, index)), None)
        child = self._child(ref, task) if task is not None else None
        try:
            if child is not None and child.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                note = f"its process {child.pid} is stopped (SIGSTOP or a debugger)"
        except psutil.Error:
            pass
        return Activity(last_output=last, note=note)

    def usage(self, ref: ClusterRef) -> list[TaskUsage]:
        """Each task from its supervisor's start to its exit (or now), with its role's
        requests from the spec it was created from. A task restarted in place counts
        its whole span, the restarts' backoff included, as a pod restarted in place does."""
        state = self._cluster(ref)
        if state is None or not state.spec:
            return []
        try:
            roles = TFClusterSpec.from_dict(state.spec).roles()
        except Exception as exc:  # a record this version cannot read: no figures, no failure
            log.warning("local backend: no usage for %s/%s: %s", ref.namespace, ref.name, exc)
            return []
        now = time.time()
        out = []
        for t in state.tasks:
            tdir = self._task_dir(ref, t.role, t.index)
            info = records.read(tdir / "supervisor.json", SupervisorInfo, self.root)
            if info is None or t.role not in roles:
                continue
            final = records.read(tdir / "exit.json", TaskExit, self.root)
            end = final.finished_at if final is not None and final.finished_at is not None else now
            requests = capacity.task_requests(roles[t.role])
            out.append(TaskUsage(f"{t.role}-{t.index}", t.role, max(0.0, end - info.started_at), requests))
        return out

    def delete_roles(self, ref: ClusterRef, roles: list[str]) -> None:
        unknown = sorted(set(roles) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown role(s) {unknown}; roles are {', '.join(ROLES)}")
        if not roles:
            return
        with self._locked(ref):
            tasks = self._tasks(ref)
            self._kill(ref, tasks, list(roles))
            self._remove_scratch(ref, tuple(t for t in tasks if t.role in roles))

    def delete(self, ref: ClusterRef, reason: str = "") -> None:
        """Stop every process of the cluster; its logs stay on disk, ``exists()`` turns False.

        ``reason`` is kept and reported as ``ClusterStatus.deleted_reason``.
        """
        with self._locked(ref):
            state = self._cluster(ref)
            # Without a readable state the tag still finds every process of the cluster.
            self._kill(ref, state.tasks if state is not None else (), None)
            self._remove_scratch(ref)
            if state is None:
                if not self.cluster_dir(ref).exists():
                    return
                state = ClusterState()
                log.warning(
                    "local backend: %s/%s had no readable state; stopped its tagged processes",
                    ref.namespace,
                    ref.name,
                )
            if not state.deleted_at:
                deleted = replace(state, deleted_at=time.time(), deleted_reason=reason)
                try:
                    records.write(self.cluster_dir(ref) / "state.json", deleted)
                except OSError as exc:
                    # A full disk: the processes are gone, but a state without deleted_at
                    # would look live. Removing it needs no space; the reason is lost.
                    log.warning(
                        "local backend: cannot record the deletion of %s/%s (%s); removing its state",
                        ref.namespace,
                        ref.name,
                        exc,
                    )
                    (self.cluster_dir(ref) / "state.json").unlink(missing_ok=True)
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
                # One bad record is skipped with a warning (records.read); the rest are listed.
                state = records.read(state_file, ClusterState, self.root)
                if state is None or state.deleted_at:
                    continue
                if (state.namespace, state.name) != (ns, state_file.parent.name):
                    log.warning(
                        "local backend: skipping the record %s: it names cluster %r in namespace %r",
                        state_file,
                        state.name,
                        state.namespace,
                    )
                    continue
                if all(state.labels.get(k) == v for k, v in labels.items()):
                    found.append(ClusterRef(name=state.name, namespace=state.namespace))
        return found
