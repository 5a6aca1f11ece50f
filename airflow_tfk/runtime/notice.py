"""Checkpoint on notice: SIGTERM (preemption, eviction, node drain) is a notice, not a kill.

Kubernetes sends SIGTERM and waits ``terminationGracePeriodSeconds`` (the spec's
``termination_grace_seconds``) before SIGKILL; the local backend does the same. A
:class:`Notice` turns the signal into a flag that the training loop looks at between two
steps: the loop then saves a checkpoint and raises :class:`Preempted`, and the task exits
with :data:`EXIT_PREEMPTED`, which the provider restarts without counting it as a failure.

``all_reduce`` uses TensorFlow's own ``PreemptionCheckpointHandler`` instead (the workers
must agree on the step to save at); it ends the same way, through :class:`Preempted`.

Every task that stops, on notice or on an error, leaves a small record next to the
checkpoints (``.tfk_attempts/<role>-<index>.json``: the step it had reached and when).
The next attempt of the same task reads it when it resumes and states in its log the
steps lost (reached before, minus resumed at) and the recovery time (from the notice, or
the error, to the first step trained again).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from airflow_tfk.runtime.exits import log

ATTEMPTS_DIR = ".tfk_attempts"


class Preempted(Exception):  # noqa: N818 - what happened, not an error
    """The loop saved a checkpoint on notice and stopped: exit with EXIT_PREEMPTED."""

    def __init__(self, step: int, saved: bool) -> None:
        super().__init__(f"stopped on notice at step {step}" + (" (checkpoint saved)" if saved else ""))
        self.step, self.saved = step, saved


class Notice:
    """SIGTERM sets a flag (once) instead of ending the process; the loop polls it."""

    def __init__(self) -> None:
        self.at: float | None = None  # time.time() of the first SIGTERM
        self._event = threading.Event()
        self._previous: Any = None

    @property
    def received(self) -> bool:
        return self._event.is_set()

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

    def uninstall(self) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self._event.is_set():
            return
        self.at = time.time()
        self._event.set()
        log("SIGTERM: notice received, saving a checkpoint at the next step boundary")


@dataclass
class Recovery:
    """What the previous attempt of this task left: the step it reached, when it stopped."""

    step: int
    at: float
    why: str  # "notice" | "error"
    resumed_step: int | None = None

    def resumed(self, step: int) -> None:
        self.resumed_step = step
        lost = max(0, self.step - step)
        log(
            f"resumed at step {step}: {lost} step(s) lost (the previous attempt stopped "
            f"{'on notice' if self.why == 'notice' else 'after an error'} at step {self.step})"
        )

    def trained(self, step: int) -> None:
        log(f"training again at step {step}, {time.time() - self.at:.1f}s after the previous attempt stopped")


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
