"""The progress-line writer API of training apps (``from airflow_tfk.runtime.progress
import progress_line``). The format itself lives in the neutral
:mod:`airflow_tfk.protocol.progress`, which the provider reads from; this module only
re-exports it so training scripts keep one import inside the runtime."""

from __future__ import annotations

from airflow_tfk.protocol.progress import (
    MARKER,
    Progress,
    event_line,
    last_event,
    last_progress,
    parse_event,
    parse_line,
    progress_line,
)

__all__ = [
    "MARKER",
    "Progress",
    "event_line",
    "last_event",
    "last_progress",
    "parse_event",
    "parse_line",
    "progress_line",
]
