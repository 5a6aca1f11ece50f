"""The progress-line writer API of training apps (``from airflow_tfk.runtime.progress
import progress_line``). The format itself lives in the neutral
:mod:`airflow_tfk.protocol.progress`, which the provider reads from; this module only
re-exports it so training scripts keep one import inside the runtime."""

from __future__ import annotations

# All of it, so the two cannot drift apart: progress_line, event_line, Progress, the parsers.
from airflow_tfk.protocol.progress import *  # noqa: F403
