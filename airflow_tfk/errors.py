"""The two error types users see: a bad spec, and a training that failed."""

from __future__ import annotations


class SpecError(ValueError):
    """Invalid cluster spec. Raised before anything is created.

    :param field: dotted path of the offending field, e.g. ``worker.replicas``.
    :param rule: the rule that was broken, in words.
    :param value: the offending value, shown with ``repr`` (optional).
    """

    def __init__(self, field: str, rule: str, value: object = ...) -> None:
        self.field = field
        self.rule = rule
        self.value = value
        shown = "" if value is ... else f" (got {value!r})"
        super().__init__(f"{field}: {rule}{shown}")


class TrainingFailed(RuntimeError):
    """A task of the TensorFlow cluster failed permanently.

    :param task: ``role-index`` of the task that failed, e.g. ``worker-1``.
    :param reason: short machine-readable reason (``ExitCode``, ``OOMKilled``, ``ImagePullBackOff``...).
    :param message: human-readable detail, e.g. the last log lines.
    """

    def __init__(self, task: str, reason: str, message: str = "") -> None:
        self.task = task
        self.reason = reason
        self.message = message
        detail = f": {message}" if message else ""
        super().__init__(f"task {task} failed ({reason}){detail}")


class CapacityError(RuntimeError):
    """``capacity_check: fail``: the cluster does not fit what the nodes have free.
    Raised before anything is created; the message names the shortfall."""
