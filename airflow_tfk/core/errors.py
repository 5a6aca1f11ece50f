"""The error types users see: a bad spec, a machine that cannot run it, a training that failed."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable

# A value quoted in a message is cut short: a hostile input (an expanded YAML alias bomb,
# a 5,000-digit integer) must not turn an error message into gigabytes.
_SHORT = reprlib.Repr()
_SHORT.maxlevel = 3
_SHORT.maxstring = 80
_SHORT.maxother = 80
_SHORT.maxlong = 40
_SHORT.maxdict = _SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = 6


def short_repr(value: object) -> str:
    """``repr(value)`` bounded in length and depth, whatever ``value`` is."""
    try:
        text = _SHORT.repr(value)
    except Exception:  # a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 200 else text[:197] + "..."


class _FieldError(Exception):
    """An error about one named setting: ``"<field>: <rule> (got <value>)"``.

    :param field: dotted path of the offending field, e.g. ``worker.replicas``.
    :param rule: the rule that was broken, in words.
    :param value: the offending value, shown with ``repr`` (optional).

    ``line`` is the 1-based line of the field in the file it came from, where known.
    """

    line: int | None = None

    def __init__(self, field: str, rule: str, value: object = ...) -> None:
        self.field = field
        self.rule = rule
        self.value = value
        shown = "" if value is ... else f" (got {short_repr(value)})"
        super().__init__(f"{field}: {rule}{shown}")

    def __reduce__(self) -> tuple[object, ...]:
        # The default rebuilds from ``self.args`` (the message alone), which does not fit
        # ``__init__``: unpickling, e.g. in another process, would raise a TypeError.
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[_FieldError], args: tuple[object, ...], state: dict[str, object]) -> _FieldError:
    exc = Exception.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class SpecError(_FieldError, ValueError):
    """Invalid cluster spec. Raised before anything is created."""


class SpecErrors(SpecError):
    """Several independent errors of one spec or file, found in one pass.

    ``field``, ``rule``, ``value`` and ``line`` are the first error's, so code that handles
    one :class:`SpecError` keeps working; ``errors`` holds them all, each with its path.
    """

    def __init__(self, errors: list[SpecError]) -> None:
        first = errors[0]
        super().__init__(first.field, first.rule, first.value)
        self.errors = list(errors)
        self.line = first.line
        self.args = ("; ".join(str(e) for e in self.errors),)

    def __str__(self) -> str:
        return str(self.args[0])


class ClusterOwnershipError(SpecError):
    """A cluster of this name exists and belongs to another task instance (or to no
    Airflow task at all). Raised before anything is created or deleted; the field is
    ``name``, and the message names the owner."""

    def __init__(self, name: str, rule: str) -> None:
        super().__init__("name", rule, name)


class TemplateValueError(ValueError):
    """A rendered value that has no text spelling (null, a boolean, a list, a mapping) was
    printed inside a text, where ``str()`` would write Python's repr.

    ``template`` is the text of the template that printed it, once known."""

    template: str | None = None


class TemplateFieldError(SpecError, TemplateValueError):
    """An operator's template field printed a value with no text spelling inside a text;
    ``field`` is the path in the field (``cluster_spec.args[0]``). Raised when Airflow
    renders the field, before the operator creates anything."""


class LocalMachineError(_FieldError, RuntimeError):
    """This machine cannot run the local cluster as asked (a fixed port is taken, the
    working directory or an executable is missing, no compiler for the loopback library).

    Not a :class:`SpecError`: the same spec may run elsewhere. Raised before anything is
    started. ``field`` names the setting (spec field or backend option) involved.
    """


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
        prefix = f"task {task} failed"
        if message.startswith(f"{prefix} ("):  # already a whole sentence (a verdict's message)
            super().__init__(message)
            return
        detail = f": {message}" if message else ""
        super().__init__(f"{prefix} ({reason}){detail}")


class WaitTimedOut(TimeoutError):
    """A wait passed its deadline (``max_duration_seconds``, a timeout of the wait). Raised
    below the Airflow face, which knows no Airflow; operators and sensors raise it as
    Airflow's ``AirflowTaskTimeout`` (:func:`airflow_tfk._airflow.compat.airflow_error`)."""


class CapacityError(RuntimeError):
    """``capacity_check: fail``: the cluster does not fit what the nodes have free.
    Raised before anything is created; the message names the shortfall."""


def unknown_key(key: object, allowed: Iterable[object], what: str = "unknown key") -> str:
    """The rule for a key nobody declared: the closest declared one first, as a typo
    (``replcas``) most often is one, then every key allowed there."""
    names = [str(a) for a in allowed]
    import difflib  # here: only a wrong key pays for it, not every import of the package

    close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{what} ({hint}allowed: {', '.join(names)})"
