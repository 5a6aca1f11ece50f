"""What the files of one model version are, as one digest, so a publish can tell whether
they changed between the quality gate (or a person's approval) and the server loading them.

The model store is shared with the trainings that write it, so a version's directory can
be swapped, or a file in it rewritten, after its metrics were checked. The digest covers
every entry's relative path, type, inode, size and change time (``st_ctime_ns``, which no
unprivileged process can set back: writing, renaming, ``chmod`` and ``utime`` all move it),
and for a symbolic link what it points to, so a link retargeted elsewhere is a change too.
No file is read: a multi-gigabyte SavedModel costs one ``stat`` per entry.
"""

from __future__ import annotations

import hashlib
import os

#: entries one version may hold before the digest refuses to vouch for it
MAX_ENTRIES = 100_000


class TooManyFiles(OSError):
    """The version holds more entries than :data:`MAX_ENTRIES`."""


def _line(rel: str, st: os.stat_result) -> str:
    return f"{rel}\0{st.st_mode}\0{st.st_ino}\0{st.st_size}\0{st.st_ctime_ns}\0{st.st_mtime_ns}\n"


def tree_digest(root: str) -> str | None:
    """The digest of ``root`` and everything under it (links followed, each directory once);
    None when ``root`` is not there. Raises :class:`TooManyFiles` past the bound."""
    try:
        top = os.stat(root)
    except OSError:
        return None
    digest = hashlib.sha256(_line(".", os.lstat(root)).encode() + _line(".", top).encode())
    seen = {(top.st_dev, top.st_ino)}
    count = 0
    stack = [(root, ".")]
    while stack:
        path, rel = stack.pop()
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            digest.update(f"{rel}\0unreadable {exc.errno}\n".encode())
            continue
        for name in names:
            count += 1
            if count > MAX_ENTRIES:
                raise TooManyFiles(f"{root} holds more than {MAX_ENTRIES} files")
            full, sub = os.path.join(path, name), f"{rel}/{name}"
            link = os.lstat(full)
            digest.update(_line(sub, link).encode())
            if os.path.islink(full):
                digest.update(f"{sub}\0-> {os.readlink(full)}\n".encode())
            try:
                st = os.stat(full)
            except OSError:
                continue  # a dangling link: its target's name is in the digest
            digest.update(_line(sub, st).encode())
            if os.path.isdir(full) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                stack.append((full, sub))
    return digest.hexdigest()
