"""Seeing a stalled training, two ways, within one bound (``stall_seconds``).

- A task that neither finishes nor fails while its peers have finished (e.g. a TF1 worker
  hung in a barrier its peers left): :class:`StallDetector` watches the statuses the wait
  loop sees. Once a task of a decisive role (worker, chief) has succeeded, every task of
  that role still running after ``bound`` seconds is reported once, by name; if the
  training then fails, the failure message names the stalled tasks too.
- No progress while the tasks run (e.g. one frozen worker: in ``parameter_server`` mode the
  chief's step stops moving while every task still "runs"): :class:`ProgressStall` watches
  the step of the progress task. Half the bound without a new step is a warning; the whole
  bound fails the training, naming the task(s) that went silent: those whose process is
  stopped, and those with no log output for as long as the progress has stood still.
  It is armed by the first progress line: a script that prints none is never judged by it.

Pure: no I/O, an injectable clock; what the backend knows of each task's activity is
handed in as :class:`Activity`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from airflow_tfk.core.constants import STALL_SECONDS
from airflow_tfk.core.status import Activity, ClusterStatus, Phase, TaskStatus
from airflow_tfk.protocol.progress import Progress
from airflow_tfk.run.policies import Outcome, Verdict, decisive_roles
from airflow_tfk.spec.cluster import Mode

# The check of ``stall_seconds`` is an argument check, imported at DAG parse time without
# what the detectors below need (the spec, the statuses); still reachable from here.
from airflow_tfk.spec.operator_options import STALL_SECONDS_MAX as STALL_SECONDS_MAX
from airflow_tfk.spec.operator_options import check_stall_seconds as check_stall_seconds

#: How long a running training may go without a new step (and a task without finishing
#: after its peers did) before it is reported stalled; ``stall_seconds`` of the operators
#: and of a training file sets it.
DEFAULT_STALL_SECONDS = STALL_SECONDS


#: Only this many running tasks are asked for their activity when a stall is judged.
ACTIVITY_TASKS_MAX = 64


class StallDetector:
    def __init__(
        self,
        mode: Mode,
        replicas: dict[str, int],
        bound: float = DEFAULT_STALL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.roles = set(decisive_roles(mode, replicas))
        self.bound = bound
        self.clock = clock
        self._first_done: dict[str, float] = {}  # role -> when a peer first succeeded
        self.stalled: list[str] = []

    def observe(self, status: ClusterStatus) -> list[str]:
        """Messages for tasks that stalled since the last call (each task once)."""
        now = self.clock()
        out = []
        for role in sorted(self.roles):
            tasks = [t for t in status.tasks if t.role == role]
            done = [t for t in tasks if t.phase is Phase.SUCCEEDED]
            if not done:
                continue
            since = self._first_done.setdefault(role, now)
            if now - since < self.bound:
                continue
            for t in tasks:
                if t.phase is Phase.RUNNING and t.name not in self.stalled:
                    self.stalled.append(t.name)
                    out.append(
                        f"task {t.name} has not finished {now - since:.0f} s after its peer "
                        f"{done[0].name} succeeded ({len(done)}/{len(tasks)} {role}s done): it may be "
                        "stalled (a hung collective or barrier?); its log shows where"
                    )
        return out

    def due_in(self) -> float | None:
        """Seconds until a role's peers have been done for the bound (None: no such role
        waits), so a wait with no news still looks at that moment."""
        due = [since + self.bound - self.clock() for since in self._first_done.values()]
        return min((d for d in due if d > 0), default=None)

    def blame(self, verdict: Verdict) -> Verdict:
        """A failed verdict that names the stalled tasks as well."""
        if verdict.outcome is not Outcome.FAILED or not self.stalled:
            return verdict
        names = ", ".join(self.stalled)
        return dataclasses.replace(verdict, message=f"{verdict.message} [stalled before: {names}]")


class ProgressStall:
    """The progress task's step, and how long it has stood still while the task runs."""

    def __init__(
        self,
        task: tuple[str, int],
        bound: float = DEFAULT_STALL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.role, self.index = task
        self.bound = bound
        self.clock = clock
        self.last: Progress | None = None
        self._moved: float | None = None  # when the step last changed (clock time)
        self._warned = False

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def saw(self, progress: Progress | None) -> None:
        """A progress line read from the progress task's log (None: none yet)."""
        if progress is None:
            return
        if self.last is None or progress.step != self.last.step:
            self._moved = self.clock()
            self._warned = False
        self.last = progress

    def still_for(self) -> float:
        return 0.0 if self._moved is None else self.clock() - self._moved

    def _armed(self, status: ClusterStatus) -> bool:
        if self.bound <= 0 or self._moved is None or self.last is None or self.last.status != "running":
            return False
        task = status.task(self.role, self.index)
        return task is not None and task.phase is Phase.RUNNING

    def warning(self, status: ClusterStatus) -> str | None:
        """Once per standstill, at half the bound: a warning line for the task log."""
        if self._warned or not self._armed(status) or self.still_for() < self.bound / 2:
            return None
        self._warned = True
        assert self.last is not None
        return (
            f"WARNING no progress for {self.still_for():.0f} s: {self.name} still reports step "
            f"{self.last.step}/{self.last.total_steps}; the training fails as stalled after "
            f"{self.bound:.0f} s without a new step (stall_seconds)"
        )

    def due_in(self) -> float | None:
        """Seconds until the standstill reaches half the bound (the warning) or the bound
        (the failure); None when neither is ahead."""
        if self.bound <= 0 or self._moved is None or self.last is None or self.last.status != "running":
            return None
        still = self.still_for()
        return next((at - still for at in (self.bound / 2, self.bound) if at > still), None)

    def stalled(self, status: ClusterStatus) -> bool:
        return self._armed(status) and self.still_for() >= self.bound

    def verdict(self, status: ClusterStatus, activity: dict[str, Activity], now: float) -> Verdict:
        """The failure of a stalled training, naming the tasks that went silent.

        ``activity`` maps running task names to what the backend knows of them; ``now``
        is the UNIX time its ``last_output`` times compare with.
        """
        quiet = self.still_for()
        assert self.last is not None
        stopped = sorted(n for n, a in activity.items() if a.note)
        silent = sorted(
            (now - a.last_output, n)
            for n, a in activity.items()
            if a.last_output is not None and now - a.last_output >= quiet
        )
        parts = [
            f"no progress for {quiet:.0f} s (stall_seconds={self.bound:g}): {self.name} last reported "
            f"step {self.last.step}/{self.last.total_steps} while its tasks still run"
        ]
        if stopped:
            parts.append("stopped: " + ", ".join(f"{n} ({activity[n].note})" for n in stopped))
        if silent:
            parts.append(
                f"no log output for {quiet:.0f} s or more: "
                + ", ".join(f"{n} (last output {age:.0f} s ago)" for age, n in reversed(silent))
            )
        unknown = sorted(n for n, a in activity.items() if a.last_output is None and not a.note)
        if unknown:
            parts.append(f"no log output seen yet: {', '.join(unknown)}")
        blamed = stopped[0] if stopped else self.name
        named = stopped or [n for _, n in reversed(silent)] or [self.name]
        message = "; ".join(parts) + f"; went silent: {', '.join(named)}"
        role, _, index = blamed.rpartition("-")
        task = TaskStatus(role, int(index), Phase.RUNNING, "Stalled", message)
        return Verdict(Outcome.FAILED, f"task {blamed} failed (Stalled): {message}", task)


def running_tasks(status: ClusterStatus) -> list[TaskStatus]:
    """The running tasks whose activity a stall verdict asks for (bounded)."""
    return [t for t in status.tasks if t.phase is Phase.RUNNING][:ACTIVITY_TASKS_MAX]
