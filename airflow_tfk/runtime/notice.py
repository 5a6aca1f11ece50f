"""Checkpoint on notice: SIGTERM (preemption, eviction, node drain) is a notice, not a kill.

Kubernetes sends SIGTERM and waits ``terminationGracePeriodSeconds`` (the spec's
``termination_grace_seconds``) before SIGKILL; the local backend does the same. A
:class:`Notice` turns the signal into a flag that the training loop looks at between two
steps: the loop then saves a checkpoint and raises :class:`Preempted`, and the task exits
with :data:`EXIT_PREEMPTED`, which the provider restarts without counting it as a failure.

``all_reduce`` uses TensorFlow's own ``PreemptionCheckpointHandler`` instead (the workers
must agree on the step to save at); it ends the same way, through :class:`Preempted`.

The notice is bounded: a task has the pod's grace period to stop, and the platform passes
it as ``TFK_TERMINATION_GRACE_SECONDS``. :func:`notice_bound` keeps a margin from it; a
task still running that long after the notice (its loop waits for peers that are gone, a
save that hangs) is ended by the notice's watchdog, which first logs what the task was
waiting for (:meth:`Notice.waiting_for`), then exits :data:`EXIT_PREEMPTED` without a
checkpoint. The grace is a bound, not the usual wait: the loops stop at once when the
peers they wait for are gone (a whole cluster being deleted).

Every task that stops, on notice or on an error, leaves a small record next to the
checkpoints (``.tfk_attempts/<role>-<index>.json``: the step it had reached and when).
The next attempt of the same task reads it when it resumes and states in its log the
steps lost (reached before, minus resumed at) and the recovery time (from the notice, or
the error, to the first step trained again).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.runtime.exits import EXIT_PREEMPTED, log

ATTEMPTS_DIR = ".tfk_attempts"

#: The pod's grace period (``terminationGracePeriodSeconds``, the spec's
#: ``termination_grace_seconds``; the local backend's kill grace), set by the platform.
GRACE_ENV = "TFK_TERMINATION_GRACE_SECONDS"
#: Kubernetes' default grace, when the variable is not set (an app run by hand).
DEFAULT_GRACE_SECONDS = 30.0
#: How often, after the notice, the watchdog looks whether the peers are gone.
PEER_LOOK_SECONDS = 0.5
#: A task still running this long after its notice writes every thread's stack to stderr,
#: once: from faulthandler's own C thread, so even while a thread that holds the GIL inside
#: a TensorFlow call keeps the watchdog from running (what a stop stuck there waits on).
STACKS_AFTER_SECONDS = 15.0


def notice_bound(env: Mapping[str, str] | None = None) -> tuple[float, float]:
    """(grace, bound): the grace period and how long after the notice the task may still
    run before its watchdog ends it, a margin before the SIGKILL (5 s, or a fifth of a
    short grace) so that the log says why and the stop record is written."""
    env = os.environ if env is None else env
    try:
        grace = float(env.get(GRACE_ENV, "") or DEFAULT_GRACE_SECONDS)
    except ValueError:
        grace = DEFAULT_GRACE_SECONDS
    if not grace > 0:  # also NaN
        grace = DEFAULT_GRACE_SECONDS
    return grace, max(0.5, grace - min(5.0, grace / 5))


class Preempted(Exception):  # what happened, not an error
    """The loop saved a checkpoint on notice and stopped: exit with EXIT_PREEMPTED."""

    def __init__(self, step: int, saved: bool) -> None:
        super().__init__(f"stopped on notice at step {step}" + (" (checkpoint saved)" if saved else ""))
        self.step, self.saved = step, saved


class Notice:
    """SIGTERM sets a flag (once) instead of ending the process; the loop polls it.

    A watchdog thread (started by :meth:`install`) ends the process :attr:`bound` seconds
    after the notice if it is still running, logging what it was waiting for, and at once
    when ``peers_gone`` says the tasks it waits on are gone for good (a deleted cluster);
    ``on_expiry`` (the app's stop record and last progress line) runs first.
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        on_expiry: Callable[[], None] | None = None,
        peers_gone: Callable[[], str | None] | None = None,
    ) -> None:
        self.at: float | None = None  # time.time() of the first SIGTERM
        self.grace, self.bound = notice_bound(env)
        self.on_expiry = on_expiry
        #: after the notice, asked every PEER_LOOK_SECONDS: why the peers this task waits
        #: on are gone for good (then it ends at once), or None
        self.peers_gone = peers_gone
        self._event = threading.Event()
        self._previous: Any = None
        self._waiting_for = "the step in progress"
        self._watchdog: threading.Thread | None = None
        self._done = threading.Event()  # uninstalled: the watchdog has nothing to watch
        self._wake = threading.Event()  # the notice, or uninstalled
        self._once = threading.Lock()  # taken by whoever sees the first SIGTERM
        self._wakeup: tuple[socket.socket, socket.socket] | None = None

    @property
    def received(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking at once on the notice; True if it came."""
        return self._event.wait(timeout)

    def waiting_for(self, what: str) -> None:
        """What the task waits for now (the watchdog's last word, if the bound passes)."""
        self._waiting_for = what

    def left(self) -> float:
        """Seconds until the watchdog ends the process (the full bound before a notice)."""
        if self.at is None:
            return self.bound
        return max(0.0, self.at + self.bound - time.time())

    def install(self) -> None:
        """Take SIGTERM (main thread only; a no-op elsewhere).

        Called again once the strategy exists: TensorFlow's coordination service installs
        its own SIGTERM handler (its preemption notifier) when a multi-worker strategy
        starts, and the process then never sees the signal.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.signal(signal.SIGTERM, self._on_signal)
        if self._previous is None:
            self._previous = previous
        self._listen()
        if self._watchdog is None:
            # Started here, not in the signal handler: a handler runs between two bytecodes
            # of the main thread, which may hold threading's own locks at that moment.
            self._done, self._wake = threading.Event(), threading.Event()
            if self._event.is_set():
                self._wake.set()
            self._watchdog = threading.Thread(
                target=self._watch, args=(self._done, self._wake), name="tfk-notice-watchdog", daemon=True
            )
            self._watchdog.start()

    def _listen(self) -> None:
        """See SIGTERM at once, not when the main thread next runs Python.

        Python runs a signal's handler in the main thread between two bytecodes; a main
        thread blocked inside TensorFlow (a step, a save, a read of a ps variable whose
        peer vanished without a reset, as a deleted pod's address does) runs none until
        that call returns, and the watchdog, woken by the handler, would not start. The
        C-level handler writes the signal's number to the wakeup fd at once, from whichever
        thread took the signal; a thread reads it and takes the notice. Left alone when the
        process already has a wakeup fd (an event loop's).
        """
        if self._wakeup is not None:
            return
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            reader.close()
            writer.close()
            return
        if previous != -1:
            signal.set_wakeup_fd(previous)
            reader.close()
            writer.close()
            return
        self._wakeup = (reader, writer)
        threading.Thread(
            target=self._read_wakeups, args=(reader,), name="tfk-notice-signal", daemon=True
        ).start()

    def _read_wakeups(self, reader: socket.socket) -> None:
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            # Only while this notice's handler is the one Python has for SIGTERM: the fd
            # outlives a handler that someone else replaced (then the signal is theirs).
            if signal.SIGTERM in data and signal.getsignal(signal.SIGTERM) == self._on_signal:
                self._noticed("SIGTERM")

    def uninstall(self) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
            if self._wakeup is not None:
                signal.set_wakeup_fd(-1)
                reader, writer = self._wakeup
                self._wakeup = None
                writer.close()  # the reading thread sees the end and returns
                reader.shutdown(socket.SHUT_RDWR)
        # Trained: a notice that came meanwhile is the loop's to honour, not the
        # watchdog's (the task exits on its own, e.g. after its export).
        self._done.set()
        self._wake.set()  # the watchdog sees _done and ends
        self._watchdog = None
        faulthandler.cancel_dump_traceback_later()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._noticed("SIGTERM")

    def _noticed(self, what: str) -> None:
        """The first SIGTERM, from the handler (main thread) or the wakeup fd's thread."""
        if not self._once.acquire(blocking=False):  # never blocks: the handler may run here
            return
        self.at = time.time()
        # Said before the watchdog wakes: it may end the process at once (peers gone).
        log(
            f"{what}: notice received: stopping at the next step boundary after a checkpoint "
            f"(at most {self.bound:.0f}s of the {self.grace:.0f}s grace)"
        )
        self._event.set()
        self._wake.set()
        _stacks_later(min(STACKS_AFTER_SECONDS, self.bound * 0.6))

    def _watch(self, done: threading.Event, wake: threading.Event) -> None:
        wake.wait()
        if done.is_set() or self.at is None:
            return
        while True:
            left = self.at + self.bound - time.time()
            if left <= 0:
                self._end(
                    f"SIGTERM {time.time() - self.at:.1f}s ago and still waiting for {self._waiting_for}: "
                    f"exiting now with {EXIT_PREEMPTED}, before the {self.grace:.0f}s grace ends in a SIGKILL"
                )
            why = self.peers_gone() if self.peers_gone is not None else None
            if why is not None and not done.is_set():
                self._end(
                    f"on notice: {why}; {self._waiting_for} will never finish: exiting now with "
                    f"{EXIT_PREEMPTED}, {time.time() - self.at:.1f}s after SIGTERM, without a checkpoint"
                )
            if done.wait(min(left, PEER_LOOK_SECONDS) if self.peers_gone is not None else left):
                return

    def _end(self, why: str) -> None:
        log(why)
        try:
            if self.on_expiry is not None:
                self.on_expiry()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_PREEMPTED)


def _stacks_later(seconds: float) -> None:
    """Every thread's stack to stderr in ``seconds``, unless the notice is uninstalled
    first (or the process has ended). Skipped when stderr is not a file (a test's capture)."""
    try:
        faulthandler.dump_traceback_later(seconds, repeat=False, file=sys.stderr)
    except (AttributeError, ValueError, OSError, RuntimeError):  # no fileno: nothing to write to
        pass


@dataclass
class Recovery:
    """What the previous attempt of this task left: the step it reached, when it stopped."""

    step: int
    at: float
    why: str  # "notice" | "error"
    resumed_step: int | None = None
    #: monotonic time of this attempt's first trained step (None: not trained yet)
    trained_at: float | None = None

    #: how long after its first step an attempt resumed after a notice may still meet
    #: what the stop left behind: a ps whose gRPC channel to the restarted task's address
    #: reconnects, TF's RPC retry that then reaches the ps twice (``ABORTED: The same
    #: RunGraph request was received twice``). Seen 0 and 2 steps after the first; a
    #: minute holds both with room, and the pass is taken once (see ``TrainingApp``).
    SETTLING_SECONDS = 60.0

    def resumed(self, step: int) -> None:
        self.resumed_step = step
        lost = max(0, self.step - step)
        log(
            f"resumed at step {step}: {lost} step(s) lost (the previous attempt stopped "
            f"{'on notice' if self.why == 'notice' else 'after an error'} at step {self.step})"
        )

    def trained(self, step: int) -> None:
        self.trained_at = time.monotonic()
        log(f"training again at step {step}, {time.time() - self.at:.1f}s after the previous attempt stopped")

    def settling(self) -> bool:
        """Still within the first moments of training after the resume."""
        return self.trained_at is None or time.monotonic() - self.trained_at < self.SETTLING_SECONDS


def _record_path(directory: str, task: str) -> str:
    return os.path.join(directory, ATTEMPTS_DIR, f"{task}.json")


def record_stop(directory: str | None, task: str, step: int, at: float | None, why: str) -> None:
    """Write what the next attempt needs to state its losses (best effort)."""
    if not directory:
        return
    path = _record_path(directory, task)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"step": int(step), "at": at if at is not None else time.time(), "why": why}, fh)
        os.replace(tmp, path)
    except OSError as exc:  # a record is worth less than the exit code
        log(f"could not record the stop at step {step}: {exc}")


def take_record(directory: str | None, task: str) -> Recovery | None:
    """The previous attempt's record (removed, so it is read once), or None."""
    if not directory:
        return None
    path = _record_path(directory, task)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        os.unlink(path)
        return Recovery(int(data["step"]), float(data["at"]), str(data.get("why", "error")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
