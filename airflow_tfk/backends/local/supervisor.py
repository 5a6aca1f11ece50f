"""Supervisor of one task of a local cluster: the local stand-in for a pod and its Job.

Run by :class:`airflow_tfk.backends.local.backend.LocalBackend` by path (not as a package module),
with the standard library only, so it starts fast and never imports Airflow::

    python -I _local_supervisor.py --daemonize <task_dir>

``--daemonize`` forks once more and starts a new session, so the supervisor is reparented
to init (no zombie in the process that created the cluster) and is its own process
group: killing the Airflow task that created the cluster does not kill the training, and
the backend can signal the whole group.

The supervisor reads ``<task_dir>/task.json`` (argv, env, cwd, restart policy, deadline),
starts the task in its own process group with stdout+stderr appended to the task's log,
and writes (atomically):

- ``supervisor.json``: ``{"pid", "started_at"}`` as soon as it runs;
- ``status.json``: the current attempt: ``{"state": "running"|"backoff"|"exited", "pid",
  "pid_create_time", "attempt", "restarts", "pids", "last_exit_code"}``;
- ``exit.json``: the final outcome, written once: ``{"phase": "Succeeded"|"Failed"|
  "Deleted", "reason", "exit_code", "restarts", "message", "finished_at"}``.

Restarts: a task that exits non-zero is started again, up to ``retries`` times, unless its
exit code is one of ``permanent_exit_codes``; an exit code of ``free_retry_exit_codes`` (a
task that stopped on notice after a checkpoint) is restarted without counting, up to
:data:`MAX_FREE_RETRIES` times in a row. A task killed by a signal reports
``128 + signal`` as Kubernetes does. Past ``deadline`` (epoch seconds) the task is killed
(SIGTERM, then SIGKILL after ``kill_grace_seconds``) and fails with ``DeadlineExceeded``.
SIGTERM/SIGINT/SIGHUP to the supervisor, or a ``deleted`` file in the task directory,
stops the task the same way and records ``Deleted``. When the task's main process exits,
whatever is left of its process group is killed, as a container's processes die with it,
and the task's scratch directory (its ``$TMPDIR``, ``scratch`` in ``task.json``) is
emptied, as the pod's emptyDir goes with the pod: a task killed by a signal never runs
its atexit clean-up, and nothing it wrote there may outlive it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

try:  # psutil comes with Airflow; without it only the process-group kill is used.
    import psutil
except ImportError:  # pragma: no cover
    psutil = None  # type: ignore[assignment]

# Longest sleep between two looks at the deleted marker and the deadline; signals and the
# task's exit wake the supervisor at once (pidfd + signal wakeup fd where available).
POLL_SECONDS = 1.0
FALLBACK_POLL_SECONDS = 0.1

# A bound on restarts that do not count, in case a task exits "stopped on notice" at once
# every time; the deadline bounds them too.
MAX_FREE_RETRIES = 100

_stop_signal: int | None = None
_wakeup_r: int | None = None


def _on_signal(signum: int, _frame: object) -> None:
    global _stop_signal
    _stop_signal = signum


def _install_signals() -> None:
    global _wakeup_r
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    _wakeup_r = r
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)


def wait_child(proc: subprocess.Popen, pidfd: int | None, timeout: float) -> bool:
    """Sleep until the task exits, a signal arrives or ``timeout``; True if it exited."""
    if pidfd is None or _wakeup_r is None:
        try:
            proc.wait(timeout=min(timeout, FALLBACK_POLL_SECONDS))
            return True
        except subprocess.TimeoutExpired:
            return False
    ready, _, _ = select.select([pidfd, _wakeup_r], [], [], max(0.0, timeout))
    if _wakeup_r in ready:
        try:
            while os.read(_wakeup_r, 512):
                pass
        except BlockingIOError:
            pass
    return proc.poll() is not None


def nap(seconds: float) -> None:
    """Sleep, but wake up at once on SIGTERM/SIGINT/SIGHUP."""
    if _wakeup_r is None:
        time.sleep(seconds)
        return
    ready, _, _ = select.select([_wakeup_r], [], [], seconds)
    if ready:
        try:
            while os.read(_wakeup_r, 512):
                pass
        except BlockingIOError:
            pass


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)  # Linux >= 5.3
    except (AttributeError, OSError):
        return None


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: the old record stays whole, no temp file is left
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# records.MAX_RECORD_BYTES: the task's record is read as the backend reads it (a regular
# file, not through a symlink, bounded), here with the standard library alone.
MAX_TASK_BYTES = 4 * 1024 * 1024


def read_task(path: str) -> dict:
    """``task.json``; ValueError when it is not a regular JSON object of at most
    :data:`MAX_TASK_BYTES` (a FIFO in its place would hang the supervisor for good)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_TASK_BYTES:
            raise ValueError(f"{path} is not a regular file of at most {MAX_TASK_BYTES} bytes")
        os.set_blocking(fd, True)
        task = json.loads(fh.read(MAX_TASK_BYTES + 1))
    if not isinstance(task, dict):
        raise ValueError(f"{path} is not a JSON object")
    return task


def _exit_code(returncode: int) -> int:
    """Kubernetes convention: a process killed by signal N exited with 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_name(code: int) -> str:
    if code > 128:
        try:
            return signal.Signals(code - 128).name
        except ValueError:
            pass
    return ""


class Supervisor:
    def __init__(self, task_dir: str) -> None:
        self.dir = task_dir
        self.task = read_task(os.path.join(task_dir, "task.json"))
        self.restarts = 0
        self.free_retries = 0  # restarts after a stop on notice: not counted in `restarts`
        self.attempt = 0
        self.pids: list[int] = []
        self.last_exit_code: int | None = None
        self.current: subprocess.Popen | None = None

    # -- bookkeeping ------------------------------------------------------------------
    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def status(self, state: str, proc: subprocess.Popen | None = None, **extra: object) -> None:
        ctime = None
        if proc is not None and psutil is not None:
            try:
                ctime = psutil.Process(proc.pid).create_time()
            except psutil.Error:
                pass
        write_json(
            self.path("status.json"),
            {
                "state": state,
                "pid": proc.pid if proc else None,
                "pid_create_time": ctime,
                "attempt": self.attempt,
                "restarts": self.restarts,
                "pids": self.pids,
                "last_exit_code": self.last_exit_code,
                "time": time.time(),
                **extra,
            },
        )

    def finish(self, phase: str, reason: str, exit_code: int | None, message: str = "") -> int:
        if not os.path.isdir(self.dir):
            return 0  # removed from under us: there is nowhere to record the outcome
        write_json(
            self.path("exit.json"),
            {
                "phase": phase,
                "reason": reason,
                "exit_code": exit_code,
                "restarts": self.restarts,
                "message": message,
                "finished_at": time.time(),
                "pids": self.pids,
            },
        )
        self.status("exited", phase=phase, reason=reason)
        return 0

    def log(self, text: str) -> None:
        try:
            fd = os.open(self.task["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            return
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write(f"[tfk-local] {text}\n")

    def stop_requested(self) -> bool:
        # A task directory that vanished (state removed by hand, a disk cleaned up) stops
        # the task too: nothing could record or report it any more.
        return _stop_signal is not None or os.path.exists(self.path("deleted")) or not os.path.isdir(self.dir)

    def deadline_passed(self) -> bool:
        deadline = self.task.get("deadline")
        return deadline is not None and time.time() >= deadline

    # -- killing ----------------------------------------------------------------------
    def kill(self, proc: subprocess.Popen, why: str = "deleted") -> int:
        """SIGTERM the task's group (and strays), SIGKILL after the grace; its exit code.
        The task's log says what was sent, and when it ended."""
        grace = float(self.task.get("kill_grace_seconds", 5.0))
        strays = self._descendants(proc.pid)
        self.log(f"{why}: SIGTERM sent; waiting up to {grace:g}s for the task to exit before SIGKILL")
        sent = time.monotonic()
        self._signal_group(proc.pid, signal.SIGTERM, strays)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.log(f"still running {grace:g}s after SIGTERM: SIGKILL")
        else:
            code = _exit_code(proc.returncode)
            self.log(f"exited {time.monotonic() - sent:.1f}s after SIGTERM (exit code {code})")
        self._signal_group(proc.pid, signal.SIGKILL, strays + self._descendants(proc.pid))
        proc.wait()
        return _exit_code(proc.returncode)

    def reap_group(self, proc: subprocess.Popen, strays: list) -> None:
        """The main process exited: nothing of its process group may outlive it."""
        self._signal_group(proc.pid, signal.SIGKILL, strays)

    @staticmethod
    def _descendants(pid: int) -> list:
        if psutil is None:
            return []
        try:
            return psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return []

    @staticmethod
    def _signal_group(pgid: int, sig: int, strays: list) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for p in strays:  # processes that left the group (setsid) but are still ours
            try:
                p.send_signal(sig)  # psutil checks the pid was not reused
            except Exception:  # gone, or never ours
                pass

    # -- the loop ---------------------------------------------------------------------
    def run(self) -> int:
        """Attempts until the task succeeds, fails for good, is deleted or times out."""
        while True:
            if self.stop_requested():
                return self.finish("Deleted", "Deleted", self.last_exit_code, "deleted before it finished")
            if self.deadline_passed():
                return self.finish(
                    "Failed",
                    "DeadlineExceeded",
                    self.last_exit_code,
                    "max_duration_seconds exceeded before the task could start",
                )
            self.attempt += 1
            proc = self.start()
            if isinstance(proc, int):
                return proc  # could not start: already finished
            outcome = self.wait(proc)
            done = self.judge(outcome, self.last_exit_code)
            if done is not None:
                return done
            self.back_off()

    def clear_scratch(self) -> None:
        scratch = self.task.get("scratch")
        if scratch:
            import shutil  # here, not at the top: nothing slows the supervisor's start

            shutil.rmtree(scratch, ignore_errors=True)

    def start(self) -> subprocess.Popen | int:
        """Start one attempt; the process, or the finish() code when it cannot start."""
        scratch = self.task.get("scratch")
        try:
            if scratch:
                os.makedirs(scratch, mode=0o700, exist_ok=True)
        except OSError as exc:
            return self.finish("Failed", "StartError", 128, f"cannot make the scratch directory: {exc}")
        try:
            log = open(  # handed to the child
                os.open(self.task["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab"
            )
        except OSError as exc:
            return self.finish("Failed", "StartError", 128, f"cannot open the log: {exc}")
        try:
            proc = subprocess.Popen(
                self.task["argv"],
                env=self.task["env"],
                cwd=self.task["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            self.log(f"cannot start {self.task['argv'][0]!r}: {exc}")
            return self.finish("Failed", "StartError", code, f"cannot start {self.task['argv'][0]!r}: {exc}")
        finally:
            log.close()
        self.current = proc
        self.pids.append(proc.pid)
        self.status("running", proc)
        return proc

    def wait(self, proc: subprocess.Popen) -> str | None:
        """Until the attempt ends: None when it exited by itself, else ``Deleted`` or
        ``DeadlineExceeded`` (it was killed). Sets ``last_exit_code``."""
        outcome = None
        strays: list = []
        scan_every = 2.0
        next_scan = time.monotonic() + 0.5
        pidfd = _pidfd(proc.pid)
        try:
            while outcome is None:
                timeout = POLL_SECONDS
                deadline = self.task.get("deadline")
                if deadline is not None:
                    timeout = min(timeout, max(0.0, deadline - time.time()))
                if wait_child(proc, pidfd, timeout):
                    break
                outcome = self.kill_if_due(proc)
                now = time.monotonic()
                if outcome is None and now >= next_scan:  # who the task started, to kill strays later
                    strays = self._descendants(proc.pid) or strays
                    next_scan = now + scan_every
                    scan_every = min(30.0, scan_every * 2)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        if outcome is None:
            self.last_exit_code = _exit_code(proc.returncode)
        self.reap_group(proc, strays)
        self.clear_scratch()
        self.current = None
        return outcome

    def stop_reason(self) -> str:
        if os.path.exists(self.path("deleted")):
            return "deleted"
        if _stop_signal is not None:
            return f"stopped ({signal.Signals(_stop_signal).name} to the supervisor)"
        return "the task directory is gone"

    def kill_if_due(self, proc: subprocess.Popen) -> str | None:
        if self.stop_requested():
            self.last_exit_code = self.kill(proc, self.stop_reason())
            return "Deleted"
        if self.deadline_passed():
            self.log(
                f"max_duration_seconds ({self.task.get('max_duration_seconds')}) exceeded: killing the task"
            )
            self.last_exit_code = self.kill(proc, "max_duration_seconds exceeded")
            return "DeadlineExceeded"
        return None

    def judge(self, outcome: str | None, code: int | None) -> int | None:
        """The finish() code when this attempt ends the task; None to restart it."""
        if outcome != "Deleted" and self.stop_requested():
            # The delete's SIGTERM reached the task's group before this supervisor looked:
            # the task's log says so as when this supervisor sends it.
            self.log(f"{self.stop_reason()}: SIGTERM sent to the task's group; it exited (exit code {code})")
        if outcome == "Deleted" or self.stop_requested():
            return self.finish("Deleted", "Deleted", code, "deleted while running")
        if outcome == "DeadlineExceeded":
            return self.finish(
                "Failed",
                "DeadlineExceeded",
                code,
                f"killed after max_duration_seconds={self.task.get('max_duration_seconds')}",
            )
        if code == 0:
            return self.finish("Succeeded", "Completed", 0)
        retries = int(self.task.get("retries", 0))
        sig = _signal_name(code or 0)
        detail = f"exit code {code}" + (f" ({sig})" if sig else "")
        if code in set(self.task.get("permanent_exit_codes", ())):
            return self.finish("Failed", "ExitCode", code, f"{detail}: permanent, not retried")
        if code in set(self.task.get("free_retry_exit_codes", ())) and self.free_retries < MAX_FREE_RETRIES:
            return None
        if self.restarts >= retries:
            return self.finish(
                "Failed",
                "ExitCode",
                code,
                f"{detail} after {self.restarts} restart(s)" if retries else detail,
            )
        return None

    def back_off(self) -> None:
        retries = int(self.task.get("retries", 0))
        backoff = float(self.task.get("restart_backoff_seconds", 1.0))
        code = self.last_exit_code
        if code in set(self.task.get("free_retry_exit_codes", ())) and self.free_retries < MAX_FREE_RETRIES:
            # stopped on notice: its checkpoint is fresh, restart at once, not counted
            self.free_retries += 1
            self.log(
                f"exit code {code} (stopped on notice after a checkpoint); restarting, not counted as a retry"
            )
            self.status("backoff", retry_at=time.time())
            return
        self.restarts += 1
        delay = min(30.0, backoff * 2 ** (self.restarts - 1))
        sig = _signal_name(code or 0)
        detail = f"exit code {code}" + (f" ({sig})" if sig else "")
        self.log(f"{detail}; restarting in {delay:.1f}s (retry {self.restarts} of {retries})")
        self.status("backoff", retry_at=time.time() + delay)
        until = time.monotonic() + delay
        while time.monotonic() < until and not self.stop_requested() and not self.deadline_passed():
            nap(min(POLL_SECONDS, max(0.0, until - time.monotonic())))


def main(argv: list[str]) -> int:
    daemonize = "--daemonize" in argv
    args = [a for a in argv if a != "--daemonize"]
    if len(args) != 1:
        print("usage: supervisor.py [--daemonize] <task_dir>", file=sys.stderr)
        return 2
    task_dir = os.path.abspath(args[0])
    # Everything the supervisor and its task create (records, checkpoints, exported
    # models, event files) is private to the user: no group or world access.
    os.umask(0o077)
    if daemonize:
        if os.fork() > 0:
            os._exit(0)  # the launcher returns at once; the supervisor goes on, reparented
        os.setsid()
    _install_signals()
    write_json(os.path.join(task_dir, "supervisor.json"), {"pid": os.getpid(), "started_at": time.time()})
    supervisor = None
    try:
        supervisor = Supervisor(task_dir)
        return supervisor.run()
    except Exception as exc:  # record why, so status() is not left guessing
        import traceback

        traceback.print_exc()
        if supervisor is not None and supervisor.current is not None:
            try:  # never leave the task running without its supervisor
                os.killpg(supervisor.current.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            write_json(
                os.path.join(task_dir, "exit.json"),
                {
                    "phase": "Failed",
                    "reason": "SupervisorError",
                    "exit_code": None,
                    "restarts": 0,
                    "message": f"local supervisor crashed: {exc!r}",
                    "finished_at": time.time(),
                    "pids": [],
                },
            )
        except OSError:
            pass
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
