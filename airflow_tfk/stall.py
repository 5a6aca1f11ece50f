"""Seeing a stalled task: one that neither finishes nor fails while its peers have
finished (issue 10 item 12; e.g. a TF1 worker hung in a barrier its peers left).

:class:`StallDetector` watches the statuses the wait loop sees. Once a task of a decisive
role (worker, chief) has succeeded, every task of that role still running after
``bound`` seconds is reported once, by name; if the training then fails, the failure
message names the stalled tasks too. Pure: no I/O, an injectable clock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from airflow_tfk.policies import Outcome, Verdict, decisive_roles
from airflow_tfk.spec import Mode
from airflow_tfk.status import ClusterStatus, Phase

DEFAULT_STALL_SECONDS = 300.0


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

    def blame(self, verdict: Verdict) -> Verdict:
        """A failed verdict that names the stalled tasks as well."""
        if verdict.outcome is not Outcome.FAILED or not self.stalled:
            return verdict
        names = ", ".join(self.stalled)
        return dataclasses.replace(verdict, message=f"{verdict.message} [stalled before: {names}]")
