"""Reading files that something else wrote, as data with bounds: a record or a log under a
directory this process keeps (the local backend's root) may have been replaced by hand, by
a crashed writer or by a stranger with the same uid.

- only a regular file is read: a FIFO would hang the reader, ``/dev/zero`` fill its memory;
- never through a symlink, and never outside ``root`` after resolving every directory on
  the way: a log linked to ``~/.ssh/id_rsa`` is not printed;
- never more than a bound: a record's size and JSON depth, a log's lines, line length and
  output, read backwards in blocks so ``--tail`` of a 20 GiB log costs its last blocks.

Every refusal is :class:`UnsafeFileError` (an :class:`OSError`, so a caller's ``except
OSError`` already covers it) whose message names the file and the rule.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# A line longer than this is cut (a log "line" of 20 GiB without a newline is one line).
MAX_LINE_BYTES = 64 * 1024
BLOCK = 64 * 1024
_CUT = b" [... cut by airflow-tfk: longer than %d bytes]"
_EARLIER = b"[... earlier output not shown: over %d bytes]\n"


#: A kubeconfig of hundreds of contexts is far below this; the client reads it whole.
MAX_KUBECONFIG_BYTES = 4 * 1024 * 1024


class UnsafeFileError(OSError):
    """A file this process refuses to read: not a regular file, a link, outside its root,
    too large or nested too deeply. The message names the file and the rule."""


def _inside(path: Path, root: Path | None) -> None:
    """Refuse ``path`` unless resolving it changes nothing below ``root``: no directory
    on the way (nor the file) is a link, so nothing leads out of ``root``."""
    if root is None:
        return
    real_root = os.path.realpath(root)
    try:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    except ValueError:
        rel = os.pardir
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        raise UnsafeFileError(errno.EPERM, f"{path}: is not under {root}")
    if os.path.realpath(os.path.join(real_root, rel)) != os.path.normpath(os.path.join(real_root, rel)):
        raise UnsafeFileError(errno.ELOOP, f"{path}: a symlink on its way under {root} (not followed)")


def open_regular(path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> int:
    """A read-only descriptor of the regular file ``path``; :class:`FileNotFoundError` when
    there is none, :class:`UnsafeFileError` for anything else than a regular file reached
    without a symlink (under ``root`` when given). Never blocks: a FIFO opens without a
    writer (O_NONBLOCK) and is refused after ``fstat``."""
    path = Path(path)
    _inside(path, None if root is None else Path(root))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFileError(errno.ELOOP, f"{path}: is a symlink (not followed)") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFileError(
            errno.EINVAL, f"{path}: is not a regular file (a FIFO, a device or a directory)"
        )
    os.set_blocking(fd, True)
    return fd


def read_bytes(
    path: str | os.PathLike[str], max_bytes: int, *, root: str | os.PathLike[str] | None = None
) -> bytes:
    """The whole of the regular file ``path``, refused when it holds more than ``max_bytes``
    (checked on the size and again on what is read: the file may grow meanwhile)."""
    fd = open_regular(path, root=root)
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > max_bytes:
            raise UnsafeFileError(errno.EFBIG, f"{path}: is larger than {max_bytes} bytes")
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UnsafeFileError(errno.EFBIG, f"{path}: is larger than {max_bytes} bytes")
    return data


def json_depth(value: Any) -> int:
    """How deeply ``value`` (parsed JSON) nests lists and dicts: walked with a stack, not
    recursion, so any depth the parser let through is measured."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in node if isinstance(child, (list, dict)))
    return deepest


def read_json(
    path: str | os.PathLike[str],
    *,
    max_bytes: int,
    max_depth: int,
    root: str | os.PathLike[str] | None = None,
) -> Any:
    """The JSON value in ``path`` within the bounds; :class:`UnsafeFileError` when a bound
    or a rule is broken, :class:`ValueError` when it is not JSON."""
    data = read_bytes(path, max_bytes, root=root)
    try:
        value = json.loads(data)
    except RecursionError:  # the parser's own bound (C, no stack spent): deeper than ours
        value = None
        deep = True
    else:
        deep = json_depth(value) > max_depth
    if deep:
        raise UnsafeFileError(errno.EINVAL, f"{path}: JSON nested deeper than {max_depth} levels")
    return value


def _cut(line: bytes, max_line: int) -> bytes:
    return line if len(line) <= max_line else line[:max_line] + _CUT % max_line


def tail(
    path: str | os.PathLike[str],
    lines: int | None,
    *,
    max_bytes: int,
    max_line: int = MAX_LINE_BYTES,
    root: str | os.PathLike[str] | None = None,
) -> str:
    """The last ``lines`` lines of the log ``path`` (None: as many as fit), '' when it does
    not exist. Read backwards in blocks of :data:`BLOCK` and never more than ``max_bytes``
    of it: when the lines asked for do not fit (a long line, a log without newlines), the
    output starts with a note that earlier output is not shown. Each line is cut at
    ``max_line`` bytes."""
    if lines is not None and lines <= 0:
        return ""
    try:
        fd = open_regular(path, root=root)
    except FileNotFoundError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        end = os.fstat(fh.fileno()).st_size
        pos = end
        chunks: list[bytes] = []
        # Newlines before the log's trailing ones: k of them make k + 1 pieces, the first
        # maybe cut, so ``lines`` whole lines are in hand once k reaches ``lines``.
        newlines = 0
        content = False
        while pos > 0 and end - pos < max_bytes and (lines is None or newlines < lines):
            step = min(BLOCK, pos, max_bytes - (end - pos))
            pos -= step
            fh.seek(pos)
            chunk = fh.read(step)
            counted = chunk if content else chunk.rstrip(b"\n")
            content = content or bool(counted)
            newlines += counted.count(b"\n")
            chunks.append(chunk)
    data = b"".join(reversed(chunks))
    got = data.rstrip(b"\n").split(b"\n") if data else []
    # The first piece is whole only when the file's start was read or a newline precedes it.
    partial = pos > 0
    if partial and len(got) > 1 and (lines is None or len(got) > lines):
        got = got[1:]
    kept = got if lines is None else got[-lines:]
    out = b"\n".join(_cut(line, max_line) for line in kept)
    if out:
        out += b"\n"
    if partial and (lines is None or len(kept) < lines):
        out = _EARLIER % max_bytes + out
    return out.decode("utf-8", errors="replace")


def iter_lines(
    path: str | os.PathLike[str],
    *,
    max_line: int = MAX_LINE_BYTES,
    root: str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """The lines of ``path`` one by one, each cut at ``max_line`` bytes: memory stays
    within a line however large the file (nothing when it does not exist)."""
    try:
        fd = open_regular(path, root=root)
    except FileNotFoundError:
        return
    with os.fdopen(fd, "rb") as fh:
        while True:
            line = fh.readline(max_line + 1)
            if not line:
                return
            if len(line) > max_line and not line.endswith(b"\n"):
                while (rest := fh.readline(BLOCK)) and not rest.endswith(b"\n"):
                    pass  # the rest of an over-long line is skipped, not held
            yield _cut(line.rstrip(b"\n"), max_line).decode("utf-8", errors="replace")


def check_kubeconfig(path: str, field: str) -> None:
    """``path`` is a kubeconfig the Kubernetes client can read: a regular file (a link to
    one is fine: ~/.kube/config often is) of at most :data:`MAX_KUBECONFIG_BYTES`. A
    directory, ``/dev/zero`` or a FIFO (which would hang the client) is a
    :class:`~airflow_tfk.core.errors.SpecError` naming ``field``."""
    from airflow_tfk.core.errors import SpecError

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise SpecError(field, f"cannot be read as a kubeconfig: {exc.strerror}", path) from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(field, "is not a kubeconfig file (a directory, a device or a FIFO)", path)
    if info.st_size > MAX_KUBECONFIG_BYTES:
        raise SpecError(field, f"is larger than {MAX_KUBECONFIG_BYTES} bytes: not a kubeconfig", path)
