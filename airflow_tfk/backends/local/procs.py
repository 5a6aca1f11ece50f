"""Finding and stopping a local cluster's processes: the recorded supervisor and task of
each task, and - so that stopping never depends on a state file - every process that
carries the cluster's tag (``TFK_LOCAL_CLUSTER``) in its environment, found through /proc.

A mixin of :class:`~airflow_tfk.backends.local.backend.LocalBackend`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import psutil

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local import records as records
from airflow_tfk.backends.local.files import (
    MARKER_ENV,
    TASK_ENV,
    _excerpt,
    _tail,
    _verified,
)
from airflow_tfk.backends.local.records import (
    PRIVATE_FILE,
    AttemptStatus,
    ClusterState,
    ProcessRef,
    SupervisorInfo,
    TaskConfig,
    TaskEntry,
    TaskExit,
    _write_json,
)
from airflow_tfk.core import naming
from airflow_tfk.core import processes as _process
from airflow_tfk.core.status import Phase, TaskStatus

SUPERVISOR = str(Path(__file__).with_name("supervisor.py"))


class LocalProcesses:
    root: str
    kill_grace_seconds: float | None
    start_timeout_seconds: float

    def _task_dir(self, ref: ClusterRef, role: str, index: int) -> Path:
        raise NotImplementedError

    def log_path(self, ref: ClusterRef, role: str, index: int) -> Path:
        raise NotImplementedError

    def _launch(self, ref: ClusterRef, cdir: Path, tasks: Sequence[TaskEntry]) -> tuple[TaskEntry, ...]:
        """Start one daemonized supervisor per task; the tasks with each one's pid and create time."""
        launchers = []
        for t in tasks:
            tdir = cdir / "tasks" / t.name
            # Only what the supervisor needs, plus the tag that finds it again.
            env = {
                "PATH": os.environ.get("PATH", os.defpath),
                MARKER_ENV: self._marker(ref),
                TASK_ENV: t.name,
            }
            argv = [sys.executable, "-I", SUPERVISOR, "--daemonize", str(tdir)]
            launchers.append(
                _process.start(argv, tdir / "supervisor.log", env, cwd=str(tdir), log_mode=PRIVATE_FILE)
            )
        for t, p in zip(tasks, launchers, strict=True):  # each returns once its supervisor forked
            code = p.wait(timeout=self.start_timeout_seconds)
            if code != 0:
                raise RuntimeError(
                    f"local backend: the supervisor of {t.name} failed to start (exit code {code}): "
                    f"{_tail(cdir / 'tasks' / t.name / 'supervisor.log', 20).strip() or 'no output'}"
                )
        give_up = time.monotonic() + self.start_timeout_seconds
        launched = []
        for t in tasks:
            tdir = cdir / "tasks" / t.name
            while (info := records.read(tdir / "supervisor.json", SupervisorInfo, self.root)) is None:
                if time.monotonic() > give_up:
                    raise RuntimeError(
                        f"local backend: the supervisor of {t.name} did not "
                        f"start within {self.start_timeout_seconds:.0f}s: "
                        f"{_tail(tdir / 'supervisor.log', 20).strip() or 'no output'}"
                    )
                time.sleep(0.01)
            try:
                ctime: float | None = psutil.Process(info.pid).create_time()
            except psutil.Error:
                ctime = None  # already gone (e.g. the task failed at once): nothing to kill
            launched.append(replace(t, supervisor=ProcessRef(info.pid, ctime)))
        return tuple(launched)

    def _task_status(self, ref: ClusterRef, task: TaskEntry) -> TaskStatus:
        role, index = task.role, task.index
        tdir = self._task_dir(ref, role, index)
        log_path = self.log_path(ref, role, index)
        final = records.read(tdir / "exit.json", TaskExit, self.root)
        current = records.read(tdir / "status.json", AttemptStatus, self.root) or AttemptStatus()
        restarts = int((final or current).restarts)
        deleted = (tdir / "deleted").exists()
        if final is not None and final.phase != "Deleted":
            phase = Phase(final.phase)
            message = ""
            if phase is Phase.FAILED:
                message = _excerpt(log_path, self.root) or final.message
            return TaskStatus(role, index, phase, final.reason, message, final.exit_code, restarts)
        if final is not None or deleted:
            return TaskStatus(
                role,
                index,
                Phase.PENDING,
                "Deleted",
                "deleted before it finished",
                final.exit_code if final else None,
                restarts,
            )
        supervisor = self._supervisor(ref, task)
        if supervisor is None and task.supervisor:
            if (tdir / "exit.json").exists() or (tdir / "deleted").exists():
                return self._task_status(ref, task)  # it just finished: read again
            # Killed from outside (or the machine rebooted) without a word: if the task
            # itself still runs, it is running; otherwise it is lost.
            if self._child(ref, task) is not None:
                return TaskStatus(role, index, Phase.RUNNING, "", "", None, restarts)
            tail = _excerpt(log_path, self.root)
            note = (
                "the local supervisor of this task is gone without recording an exit "
                "status (killed from outside, or the machine restarted)"
            )
            return TaskStatus(
                role, index, Phase.FAILED, "Lost", f"{note}\n{tail}" if tail else note, None, restarts
            )
        state = current.state
        if state == "running":
            return TaskStatus(role, index, Phase.RUNNING, "", "", None, restarts)
        if state == "backoff":
            code = current.last_exit_code
            return TaskStatus(
                role, index, Phase.PENDING, "BackOff", f"exited with code {code}; restarting", code, restarts
            )
        return TaskStatus(role, index, Phase.PENDING, "Starting", "", None, restarts)

    def _marker(self, ref: ClusterRef) -> str:
        digest = naming.short_hash(self.root, length=12)
        return f"{digest}/{ref.namespace}/{ref.name}"

    def _marked(self, ref: ClusterRef, roles: list[str] | None = None) -> list[psutil.Process]:
        """Live processes that carry this cluster's tag (and, given ``roles``, belong to one
        of them): found through /proc, whatever became of the state directory."""
        mark = self._marker(ref)
        found = []
        me = os.getpid()
        for proc in psutil.process_iter():
            if proc.pid == me:
                continue
            try:
                env = proc.environ()
                if env.get(MARKER_ENV) != mark or not _process.running(proc):
                    continue
                if roles is not None and env.get(TASK_ENV, "").rsplit("-", 1)[0] not in roles:
                    continue
            except psutil.Error:  # gone, or another user's process
                continue
            found.append(proc)
        return found

    def _supervisor(self, ref: ClusterRef, task: TaskEntry) -> psutil.Process | None:
        sup = task.supervisor
        if sup:
            if sup.create_time is None:
                return None
            return _verified(sup.pid, sup.create_time)
        info = records.read(
            self._task_dir(ref, task.role, task.index) / "supervisor.json", SupervisorInfo, self.root
        )
        if info is None:  # still launching (create holds the lock)
            return None
        proc = _verified(info.pid, None)
        if proc is not None and abs(proc.create_time() - info.started_at) > 5:
            return None
        return proc

    def _child(self, ref: ClusterRef, task: TaskEntry) -> psutil.Process | None:
        st = records.read(
            self._task_dir(ref, task.role, task.index) / "status.json", AttemptStatus, self.root
        )
        if st is None or st.state != "running":
            return None
        return _verified(st.pid, st.pid_create_time)

    def _live(self, ref: ClusterRef, state: ClusterState) -> bool:
        return any(
            self._supervisor(ref, t) is not None or self._child(ref, t) is not None for t in state.tasks
        )

    def _mark_deleted(self, ref: ClusterRef, tasks: Sequence[TaskEntry]) -> float:
        """Leave each task's ``deleted`` marker (its supervisor stops on it); the longest
        kill grace among them."""
        grace = self.kill_grace_seconds or 0.0
        for t in tasks:
            tdir = self._task_dir(ref, t.role, t.index)
            if tdir.is_dir() and not (tdir / "deleted").exists():
                try:
                    _write_json(tdir / "deleted", {"deleted_at": time.time()})
                except OSError:
                    # A full disk: the marker's presence is what counts (an empty file needs
                    # no block), and the signals below stop the task without it anyway.
                    with contextlib.suppress(OSError):
                        os.close(os.open(tdir / "deleted", os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
            config = records.read(tdir / "task.json", TaskConfig, self.root)
            grace = max(grace, float(config.kill_grace_seconds) if config else 0.0)
        return grace

    def _targets(
        self, ref: ClusterRef, tasks: Sequence[TaskEntry], roles: list[str] | None
    ) -> tuple[set[int], dict[int, psutil.Process]]:
        """Process groups and processes to signal: the recorded ones and their children,
        and - even when the state or task files are gone or corrupt - every tagged one."""
        groups: set[int] = set()
        procs: dict[int, psutil.Process] = {p.pid: p for p in self._marked(ref, roles)}
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

    def _kill(self, ref: ClusterRef, all_tasks: Sequence[TaskEntry], roles: list[str] | None) -> None:
        """Stop the tasks of ``roles`` (all for None) and wait until none of their processes
        is left: SIGTERM to each process group, SIGKILL after the grace."""
        tasks = [t for t in all_tasks if roles is None or t.role in roles]
        grace = self._mark_deleted(ref, tasks)
        groups, procs = self._targets(ref, tasks, roles)
        if not procs:
            return
        # The supervisors stop their tasks themselves on SIGTERM (recording "Deleted"), with
        # their own grace; give them that long, plus a little, before SIGKILL.
        _process.signal_all(signal.SIGTERM, groups, procs)
        alive = _process.wait_gone(list(procs.values()), grace + 2.0)
        for _ in range(3):
            more_groups, more = self._targets(ref, tasks, roles)  # e.g. a restart that raced
            procs = {p.pid: p for p in alive} | more
            if not procs:
                return
            _process.signal_all(signal.SIGKILL, groups | more_groups, procs)
            alive = _process.wait_gone(list(procs.values()), 5.0)
            if not alive:
                groups = set()
        leftover = sorted(p.pid for p in alive)
        if leftover:
            raise RuntimeError(
                f"local backend: processes {leftover} of {ref.namespace}/{ref.name} did not die after SIGKILL"
            )
