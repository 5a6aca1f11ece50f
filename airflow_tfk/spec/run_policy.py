"""The previous-run policies of scheduled training. No imports: DAG files validate the
operator's argument at parse time with it."""

from __future__ import annotations

import enum


class PreviousRunPolicy(str, enum.Enum):
    """What to do, before a run starts, with a still-alive cluster of an earlier run of the
    same training (same dag and task, another run).

    - ``allow``: nothing; both run.
    - ``kill_previous``: delete the earlier cluster; its run fails naming this run.
    - ``skip``: skip this run.
    - ``wait``: wait until the earlier cluster is gone or finished.
    """

    ALLOW = "allow"
    KILL_PREVIOUS = "kill_previous"
    SKIP = "skip"
    WAIT = "wait"
