"""``clusters logs --follow``: what a task writes, printed as it comes, until it ends.

The backends read a log whole (or its last lines); there is no stream to hold open across
both of them. So the log is read again every interval and what lies past the part already
printed is written. A log that got shorter or changed underneath (a restarted pod's new
container) is printed again from its start, after a line that says so. The task's phase is
read with each poll: once it has finished, one last read and the follow ends, as
``kubectl logs -f`` ends with its container.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from airflow_tfk.core.status import Phase

if TYPE_CHECKING:
    from airflow_tfk.backends.base import Backend, ClusterRef

_ANCHOR = 256  # characters compared to tell a grown log from a new one


def _new_part(before: str, now: str) -> str | None:
    """What ``now`` adds to ``before``; None when ``now`` is not ``before`` grown."""
    if len(now) < len(before) or now[max(0, len(before) - _ANCHOR) : len(before)] != before[-_ANCHOR:]:
        return None
    return now[len(before) :]


def _finished(backend: Backend, ref: ClusterRef, role: str, index: int) -> bool:
    status = backend.status(ref)
    task = status.task(role, index)
    return task is None or task.phase in (Phase.SUCCEEDED, Phase.FAILED) or task.reason == "Deleted"


def follow(
    backend: Backend,
    ref: ClusterRef,
    role: str,
    index: int,
    printed: str,
    interval: float,
    out: TextIO,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Print what the log of ``role-index`` adds to ``printed`` (the whole log as read
    last), until the task has finished."""
    seen = printed
    while True:
        done = _finished(backend, ref, role, index)
        now = backend.logs(ref, role, index)
        part = _new_part(seen, now)
        if part is None:
            out.write(f"--- the log of {role}-{index} started again (a new attempt) ---\n")
            part = now
        out.write(part)
        out.flush()
        seen = now
        if done:  # read after the task ended: nothing more will come
            return
        sleep(interval)
