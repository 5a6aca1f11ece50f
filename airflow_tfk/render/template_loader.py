"""The loader of every template directory: a template reads only its own directory.

A ``template_dir`` comes from a repository whose authors are not trusted to read the
worker's files. Jinja's ``FileSystemLoader`` follows symbolic links, so
``{% include 'leak' %}`` with ``leak -> /etc/passwd`` put that file in a Job's annotation.
Here every name a template asks for (``include``, ``import``, ``from``, ``extends``, or the
renderer's own lookup) is:

- a relative name of plain parts: no absolute name, no ``..``, ``.``, empty part, backslash
  or NUL (refused, not looked up elsewhere);
- found in the first search directory that holds an entry of that name, and then read
  from there or refused: an entry is never skipped for the next directory, so a bad
  override fails instead of silently falling back to the built-in;
- inside its directory after symbolic links: the directory is resolved once (a
  ``template_dir`` that is itself a link is allowed, and names the directory it points
  to), and the entry's real path must be under it, as the store reader's rule;
- a regular file (a FIFO would hang the render, ``/dev/zero`` fill the memory) of at most
  :data:`MAX_TEMPLATE_BYTES`, read through one descriptor opened without blocking, in UTF-8.

The same loader serves the built-in directory, so a packaged template cannot lead out either.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from types import CodeType

import jinja2
from jinja2.bccache import Bucket

#: between two and three times the largest built-in template (6 KiB): parsing and compiling
#: grow with the size (a dense 256 KiB template took 5.6 CPU-s to compile), so this bounds
#: the work before the render's own bounds apply
MAX_TEMPLATE_BYTES = 16 * 1024


class TemplateReadRefused(jinja2.TemplateError):
    """A template name or file that a template directory may not serve (outside the
    directory, not a regular file, too big, not UTF-8). Not a ``TemplateNotFound``, so
    ``{% include ... ignore missing %}`` cannot turn it into a silent fallback."""

    def __init__(self, name: str, rule: str) -> None:
        super().__init__(f"template {name!r}: {rule}")
        self.name = name


def _parts(name: str) -> list[str]:
    if not isinstance(name, str) or not name:
        raise TemplateReadRefused(str(name), "a template name must be a non-empty string")
    if "\x00" in name or "\\" in name:
        raise TemplateReadRefused(name, "a template name may not hold NUL or a backslash")
    if name.startswith("/"):
        raise TemplateReadRefused(name, "is an absolute name; templates name files of their own directory")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise TemplateReadRefused(
            name, "has an empty, '.' or '..' part; templates name files of their own directory"
        )
    return parts


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def read_template(root: str, path: str, name: str) -> str:
    """The text of the template ``name`` found at ``path`` in the resolved directory
    ``root``, or :class:`TemplateReadRefused` naming the rule it breaks."""
    real = os.path.realpath(path)
    if not real.startswith(root + os.sep):
        raise TemplateReadRefused(
            name, f"resolves to {real}, outside its directory {root} (templates read only their directory)"
        )
    try:
        # The resolved path, its last part not followed: a link swapped in after the check
        # fails here instead of being read.
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TemplateReadRefused(name, f"cannot be read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TemplateReadRefused(name, f"is {_kind(info.st_mode)}; a template must be a regular file")
        if info.st_size > MAX_TEMPLATE_BYTES:
            raise TemplateReadRefused(
                name, f"is {info.st_size} bytes; a template may have at most {MAX_TEMPLATE_BYTES}"
            )
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_TEMPLATE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TEMPLATE_BYTES:  # grew after fstat
        raise TemplateReadRefused(name, f"has more than {MAX_TEMPLATE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TemplateReadRefused(name, f"is not UTF-8 text (byte {exc.start})") from None


class ConfinedLoader(jinja2.BaseLoader):
    """Jinja's loader over search directories, first match wins, each confined to itself."""

    def __init__(self, dirs: Sequence[str | Path]) -> None:
        self.roots = [os.path.realpath(d) for d in dirs]

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        parts = _parts(template)
        for root in self.roots:
            path = os.path.join(root, *parts)
            if os.path.lexists(path):
                return read_template(root, path, template), path, lambda: True
        raise jinja2.TemplateNotFound(template)

    def list_templates(self) -> list[str]:
        raise TypeError("a confined loader does not list its templates")

    def __repr__(self) -> str:
        return f"ConfinedLoader({self.roots!r})"


class SharedBytecode(jinja2.BytecodeCache):
    """Compiled templates shared by every environment, keyed by the file's path and the
    checksum of its text: an environment with a ``template_dir`` compiles only the user's
    files, not the built-ins again (compiling is most of a first render's cost)."""

    MAX_ENTRIES = 256

    def __init__(self) -> None:
        self._codes: dict[tuple[str, str], CodeType] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        code = self._codes.get((bucket.key, bucket.checksum))
        if code is not None:
            bucket.code = code

    def dump_bytecode(self, bucket: Bucket) -> None:
        if bucket.code is None:
            return
        if len(self._codes) >= self.MAX_ENTRIES:
            self._codes.pop(next(iter(self._codes)))
        self._codes[(bucket.key, bucket.checksum)] = bucket.code


SHARED_BYTECODE = SharedBytecode()
