"""Field checks shared by the spec classes: each raises a :class:`SpecError` naming the
field. Pure; no Kubernetes client.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError, unknown_key

if TYPE_CHECKING:
    from airflow_tfk.spec.network import TrainingNetworkPolicy

# Characters that have no business in a name, image or command and that would change
# the meaning of YAML or Jinja if they were ever spliced into text.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _text(value: object, where: str, *, allow_empty: bool = False, max_len: int = 4096) -> str:
    if not isinstance(value, str):
        raise SpecError(where, "must be a string", value)
    if not allow_empty and not value.strip():
        raise SpecError(where, "must not be empty", value)
    if _CONTROL.search(value) or "\n" in value or "\r" in value:
        raise SpecError(where, "must not contain newlines or control characters", value)
    if len(value) > max_len:
        raise SpecError(where, f"must be at most {max_len} characters", value)
    return value


def _utf8(text: str, where: str) -> None:
    # A lone surrogate cannot be sent to the API server (JSON over UTF-8) nor to a process.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(where, "must be valid Unicode text (no lone surrogates)", text) from None
    # Found against the real API server: the Kubernetes client sends a server-side apply as
    # ASCII-escaped JSON, where a character beyond U+FFFF becomes a surrogate pair, and the
    # API server's YAML reader refuses it ("invalid Unicode character escape code").
    if any(ord(c) > 0xFFFF for c in text):
        raise SpecError(
            where, "must not contain characters beyond U+FFFF (e.g. emoji): the API server refuses them", text
        )


#: Linux's PATH_MAX: the longest path a system call takes
PATH_MAX_CHARS = 4096
_PATH_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def path_text(value: object, where: str, *, kind: str) -> str:
    """A path a spec field names, checked by one rule wherever the spec takes one (a
    sub-path inside a claim, a mount path, a local directory, a study's file): text of at
    most ``PATH_MAX`` characters, without NUL, newlines or control characters (no process
    or mount takes NUL, and the others end up in logs and manifests as something else),
    without a backslash (a POSIX path separates with '/': a backslash is part of a file
    name there, and a different path on Windows), and without a '..' segment (it climbs out
    of wherever the path is meant to stay, and the kubelet refuses it in a sub-path).

    ``kind``: ``relative`` (inside a root: must not start with '/'), ``absolute`` (must
    start with '/') or ``any``. Returns the text unchanged."""
    if not isinstance(value, str):
        raise SpecError(where, "must be a path (text)", value)
    bad = _PATH_CONTROL.search(value)
    if bad is not None:
        what = {"\x00": "NUL", "\n": "a newline", "\r": "a carriage return"}.get(
            bad.group(), "a control character"
        )
        raise SpecError(where, f"must not contain {what}", value)
    if "\\" in value:
        raise SpecError(
            where, "must not contain a backslash: a POSIX path separates its parts with '/'", value
        )
    if len(value) > PATH_MAX_CHARS:
        raise SpecError(where, f"must be at most {PATH_MAX_CHARS} characters (PATH_MAX)", value)
    _utf8(value, where)
    if ".." in value.split("/"):
        raise SpecError(where, "must not contain a '..' segment (it climbs out of its directory)", value)
    if kind == "relative" and value.startswith("/"):
        raise SpecError(where, "must be a relative path (it is inside its volume)", value)
    if kind == "absolute" and not value.startswith("/"):
        raise SpecError(where, "must be an absolute path", value)
    return value


def _local_dir(value: object, where: str) -> str:
    """A directory on the machine that reads it (a field's ``check``)."""
    path_text(value, where, kind="any")
    return _text(value, where)


# Bounds on the collections of a spec, checked with len() before any item is looked at,
# so a list of a million arguments is refused in microseconds. Far above what a training
# needs; the API server's own bound is the object size (about 1.5 MiB).
MAX_LIST_ITEMS = 4096
MAX_MAP_ITEMS = 4096
MAX_LIST_CHARS = 256 * 1024


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _exec_string(size: int, where: str, value: object) -> None:
    """One argument or ``NAME=value`` string of the task's exec, ``size`` in UTF-8 bytes
    (what the kernel counts): Linux refuses the whole exec (E2BIG) when one of them is over
    ``MAX_ARG_STRLEN``, so the task could never start."""
    from airflow_tfk.protocol.exec_limits import MAX_STRING_CHARS

    if size > MAX_STRING_CHARS:
        raise SpecError(
            where,
            f"has {size:,} bytes (UTF-8), over Linux's limit of {MAX_STRING_CHARS:,} for one argument "
            "or NAME=value string of a process (MAX_ARG_STRLEN); pass large data in a file",
            value,
        )


def flag_text(value: object, where: str) -> str:
    """A value written as one command-line argument, the same way wherever the platform
    writes one (a sweep's trial flags): a string as it is, a number in Python's shortest
    exact spelling, a boolean as ``true``/``false`` (what the runtime's flags and absl
    read). A null, a list or a mapping has no spelling an app's flag parser would read
    back (``str()`` gives Python's ``None``/``[1, 2]``), so it is refused naming the field."""
    import math

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(where, "must be a finite number", value)
        return repr(value)
    kind = "null" if value is None else type(value).__name__
    raise SpecError(
        where,
        f"must be a string, number or boolean: a {kind} has no command-line spelling "
        "(it would reach the app as Python's text for it)",
        value,
    )


#: The API server's bound on all the annotations of one object, keys and values together
#: (``TotalAnnotationSizeLimitB``), less room for the platform's own (its run identity).
ANNOTATIONS_MAX_BYTES = 256 * 1024 - 8 * 1024


def annotations_size(where: str, annotations: Mapping[str, str]) -> None:
    """Refuse annotations the API server would refuse for their total size."""
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        raise SpecError(
            where,
            f"total {size:,} bytes, over the {ANNOTATIONS_MAX_BYTES:,} the API server leaves them "
            "(256 KiB for all of an object's annotations, the platform's included)",
        )


def _bounded(value: Sized, where: str, limit: int) -> None:
    if len(value) > limit:
        raise SpecError(where, f"has {len(value)} items, over the limit of {limit}")


def _int(value: object, where: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(where, "must be an integer", value)
    if not lo <= value <= hi:
        raise SpecError(where, f"must be between {lo} and {hi}", value)
    return value


def _str_map(value: object, where: str, *, keys: str) -> dict[str, str]:
    """Validate a string->string mapping; ``keys`` is 'env', 'label' or 'label-key'."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(where, "must be a mapping", value)
    _bounded(value, where, MAX_MAP_ITEMS)
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise SpecError(where, "keys must be strings", k)
        if keys == "env" and not naming.is_env_name(k):
            raise SpecError(f"{where}.{k}", "is not a valid environment variable name")
        if keys in ("label", "label-key") and not naming.is_label_key(k):
            raise SpecError(f"{where}.{k}", "is not a valid label key")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise SpecError(f"{where}.{k}", "must be a string or number", v)
        out[k] = _map_value(str(v), f"{where}.{k}", keys, v)
    if keys == "label-key":
        annotations_size(where, out)
    return out


def _map_value(text: str, where: str, keys: str, value: object) -> str:
    if keys == "env":
        # Env values are data: any text is fine (it is emitted as a JSON string), but
        # NUL cannot be passed to a process.
        if "\x00" in text:
            raise SpecError(where, "must not contain NUL", value)
        _utf8(text, where)
        name = where.rpartition(".")[2]
        _exec_string(len(name) + 1 + _utf8_bytes(text), where, f"{len(text):,} characters")
    elif keys == "label" and not naming.is_label_value(text):
        raise SpecError(where, "is not a valid label value", value)
    elif keys == "label-key":
        _text(text, where, allow_empty=True)
        _utf8(text, where)
    return text


def _name(value: str, where: str, valid: Callable[[str], bool], rule: str) -> None:
    """A Kubernetes name rule (``naming.is_dns1035_label``...): ``where`` must be ``rule``."""
    if not valid(value):
        raise SpecError(where, f"must be {rule}", value)


def _str_list(value: object, where: str, *, allow_empty_items: bool = True) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise SpecError(where, "must be a list of strings", value)
    _bounded(value, where, MAX_LIST_ITEMS)
    out = []
    chars = 0
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise SpecError(f"{where}[{i}]", _not_text(item), item)
        text = str(item)
        if "\x00" in text:
            raise SpecError(f"{where}[{i}]", "must not contain NUL", item)
        _utf8(text, f"{where}[{i}]")
        if not allow_empty_items and not text:
            raise SpecError(f"{where}[{i}]", "must not be empty", item)
        _exec_string(_utf8_bytes(text), f"{where}[{i}]", item)
        chars += len(text)
        if chars > MAX_LIST_CHARS:
            raise SpecError(where, f"totals over {MAX_LIST_CHARS} characters", f"{len(value)} items")
        out.append(text)
    return tuple(out)


def _not_text(value: object) -> str:
    """Why a value that is not text cannot be one argument of a command line."""
    if isinstance(value, bool):
        # YAML reads yes/no/on/off/true/false unquoted as booleans; which spelling the app
        # wanted is lost, so the spec does not pick one
        return (
            "must be a string: quote a boolean (YAML reads yes/no/on/off as one), "
            "or render it with '| tojson'"
        )
    kind = "null" if value is None else type(value).__name__
    return f"must be a string: a {kind} has no command-line spelling (str() would give Python's)"


def _reject_unknown(data: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    if not isinstance(data, Mapping):
        raise SpecError(where or "spec", "must be a mapping", data)
    for key in data:
        if not isinstance(key, str):
            raise SpecError(where or "spec", "keys must be strings", key)
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        path = f"{where}.{unknown[0]}" if where else str(unknown[0])
        raise SpecError(path, unknown_key(unknown[0], sorted(allowed)))


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


# Resource names the API server or the scheduler own: a GPU limit must not overwrite them.
_NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "storage", "pods")


def _check_gpu_resource(value: object, where: str) -> None:
    """An extended resource name as the API server wants it: fully qualified
    (``vendor.example/gpu``), outside the ``kubernetes.io`` domain, not a native resource."""
    if not isinstance(value, str) or not naming.is_label_key(value):
        raise SpecError(where, "is not a valid resource name", value)
    prefix, slash, name = value.rpartition("/")
    if not slash:
        raise SpecError(where, "must be a fully qualified extended resource such as 'nvidia.com/gpu'", value)
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or prefix.startswith("requests."):
        raise SpecError(
            where, "must not be in the kubernetes.io domain (reserved for native resources)", value
        )
    if name in _NATIVE_RESOURCES or name.startswith("hugepages-"):
        raise SpecError(where, "must not name a native resource such as cpu or memory", value)


# Labels the Job, StatefulSet and ReplicaSet controllers set on their pods: a user label
# of that name would be overwritten, or break the controller's selector.
_CONTROLLER_LABELS = ("job-name", "controller-uid", "controller-revision-hash", "pod-template-hash")
# Domains whose labels the provider sets or selects on (its own; app.kubernetes.io/*), or that
# Kubernetes and the add-ons it drives own: batch.kubernetes.io/* (Job), jobset.sigs.k8s.io/*
# (JobSet), kueue.x-k8s.io/* (Kueue's queue-name, priority-class...). A user label there would
# override what the provider says (a queue_name) or what a controller selects on.
_RESERVED_LABEL_DOMAINS = (naming.LABEL_PREFIX, "kubernetes.io", "k8s.io", "x-k8s.io")


def reserved_label(key: str) -> str | None:
    """Why the label key ``key`` is not the user's to set, or None when it is."""
    prefix, _, name = key.rpartition("/")
    if not prefix:
        return "is set by the Job and ReplicaSet controllers" if name in _CONTROLLER_LABELS else None
    for domain in _RESERVED_LABEL_DOMAINS:
        if prefix == domain or prefix.endswith("." + domain):
            owner = "the platform" if domain == naming.LABEL_PREFIX else "Kubernetes and its add-ons"
            return f"is reserved for {owner} (labels under {domain}/ are set or selected on by them)"
    return None


# -- the checks of TFClusterSpec's own fields (declared in airflow_tfk.spec.cluster) ---------


def cluster_name(value: Any, path: str) -> str:
    _text(value, path, max_len=63)
    if not naming.is_dns1035_label(value):
        raise SpecError(
            path, "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter", value
        )
    return str(value)


def image_text(value: Any, path: str) -> str:
    text = _text(value, path, max_len=1024)
    _utf8(text, path)
    return text


def must_run(value: Any, path: str) -> tuple[str, ...]:
    if not value:
        raise SpecError(path, "must not be empty: which program does each task run?")
    return tuple(value)


def subdomain(what: str) -> Callable[[Any, str], str]:
    """A check: a DNS-1123 subdomain (a PVC, Secret, storage class or account name)."""

    def check(value: Any, path: str) -> str:
        if not naming.is_dns1123_subdomain(value):
            raise SpecError(path, f"is not a valid {what}", value)
        return str(value)

    return check


def not_reserved_labels(value: Any, path: str) -> dict[str, str]:
    for key in sorted(value):
        why = reserved_label(key)
        if why:
            raise SpecError(f"{path}.{key}", why)
    return dict(value)


def secret_names(value: Any, path: str) -> tuple[str, ...]:
    for i, secret in enumerate(value):
        if not naming.is_dns1123_subdomain(secret):
            raise SpecError(f"{path}[{i}]", "is not a valid Secret name", secret)
    return tuple(value)


def exit_codes(value: Any, path: str) -> tuple[int, ...]:
    from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED

    codes = tuple(sorted(set(value)))
    if EXIT_PREEMPTED in codes:
        raise SpecError(
            path,
            f"must not contain {EXIT_PREEMPTED}: the exit code of a task stopped on notice "
            "after a checkpoint, which is always restarted",
            list(codes),
        )
    return codes


def queue(value: Any, path: str) -> str | None:
    from airflow_tfk.spec import admission

    return admission.queue_name(value)


def network_policy(value: Any, path: str) -> TrainingNetworkPolicy:
    from airflow_tfk.spec.network import TrainingNetworkPolicy

    return TrainingNetworkPolicy.from_value(value, path)
