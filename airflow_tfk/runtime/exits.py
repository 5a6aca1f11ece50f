"""Exit codes of a training task and the errors that map to them.

Shared by the app, its training loops and the evaluator, so every way a task can end is
decided in one place. Pure Python: TensorFlow is imported only to classify an exception
that may be one of its own.
"""

from __future__ import annotations

import sys

from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED as EXIT_PREEMPTED
from airflow_tfk.protocol.exit_codes import EXIT_RETRYABLE as EXIT_RETRYABLE

EXIT_OK = 0
EXIT_APP_ERROR = 1  # a bug in the app: permanent
EXIT_USAGE = 2  # bad flags or cluster environment: permanent


class UsageError(Exception):
    """Flags or environment that cannot work (exit code 2)."""


def log(msg: str) -> None:
    print(f"[tfk] {msg}", file=sys.stderr, flush=True)


def exit_code(exc: SystemExit) -> int:
    return exc.code if isinstance(exc.code, int) else EXIT_APP_ERROR


def is_transient(exc: BaseException) -> bool:
    """Cluster trouble that a retry can fix."""
    from airflow_tfk.runtime.cluster import ClusterWaitTimeout

    if isinstance(exc, ClusterWaitTimeout):
        return True
    try:
        import tensorflow as tf
    except ImportError:  # pragma: no cover
        return False
    return isinstance(
        exc,
        tf.errors.UnavailableError
        | tf.errors.AbortedError
        | tf.errors.DeadlineExceededError
        | tf.errors.CancelledError,
    )
