"""What the files of one model version are, as one digest, so a publish can tell whether
they changed between the quality gate (or a person's approval) and the server loading them.

The model store is shared with the trainings that write it, so a version's directory can
be swapped, or a file in it rewritten, after its metrics were checked. The digest covers
every entry's relative path, type, inode, size and change time (``st_ctime_ns``, which no
unprivileged process can set back: writing, renaming, ``chmod`` and ``utime`` all move it),
and for a symbolic link what it points to, so a link retargeted elsewhere is a change too.
No file is read: a multi-gigabyte SavedModel costs one ``stat`` per entry.

Written twice, with the same coverage and bounds: :func:`tree_digest` where the provider
sees the store (the local backend), :data:`DIGEST_SCRIPT` where only a pod does (the
Kubernetes store reader, GNU ``find -L`` in the serving image). A digest is only ever
compared with one taken the same way, so the two need not agree with each other.

A digest is ``<sha256 of everything> <entries> <part>=<sha256 prefix> ...``: the parts
(:data:`PARTS`, the version's directory itself ``.``, and ``other``) say in a refusal what
changed, without a file name from the store reaching a log.
"""

from __future__ import annotations

import hashlib
import os
import re

#: entries one version may hold before the digest refuses to vouch for it
MAX_ENTRIES = 100_000
#: bytes of listing (paths and stat fields) the Kubernetes reader hashes at most: a tree
#: of few entries with very long names refuses as too many rather than fill the pod's /tmp
MAX_LISTING_BYTES = 64 * 1024 * 1024
#: a version's metrics file or sample request is a few KiB; a bigger one is not read (on
#: either backend: it is treated as missing)
MAX_STORE_JSON = 1 << 20
#: the entries of a SavedModel that a refusal names by themselves
PARTS = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "variables", "assets", "assets.extra")
ALL_PARTS = (".", *PARTS, "other")
_DIGEST = re.compile(r"[0-9a-f]{64} [0-9]+( [^ =]+=[0-9a-f]{16})+")


class TooManyFiles(OSError):
    """The version holds more entries than :data:`MAX_ENTRIES`."""


def _line(rel: str, st: os.stat_result) -> str:
    return f"{rel}\0{st.st_mode}\0{st.st_ino}\0{st.st_size}\0{st.st_ctime_ns}\0{st.st_mtime_ns}\n"


def part_of(rel: str) -> str:
    """The part of the version a relative path (``""`` for the directory itself) is in."""
    if not rel:
        return "."
    top = rel.split("/", 1)[0]
    return top if top in PARTS else "other"


def _compose(whole: str, entries: int, parts: dict[str, str]) -> str:
    return f"{whole} {entries} " + " ".join(f"{p}={parts[p][:16]}" for p in ALL_PARTS)


def tree_digest(root: str) -> str | None:
    """The digest of ``root`` and everything under it (links followed, each directory once);
    None when ``root`` is not there. Raises :class:`TooManyFiles` past the bound."""
    try:
        top = os.stat(root)
    except OSError:
        return None
    digest = hashlib.sha256(_line(".", os.lstat(root)).encode() + _line(".", top).encode())
    parts = {p: hashlib.sha256() for p in ALL_PARTS}
    parts["."].update(_line(".", top).encode())
    seen = {(top.st_dev, top.st_ino)}
    count = 0
    stack = [(root, ".")]

    def add(rel: str, text: str) -> None:
        digest.update(text.encode())
        parts[part_of(rel[2:])].update(text.encode())

    while stack:
        path, rel = stack.pop()
        try:
            names = sorted(os.listdir(path))
        except OSError as exc:
            add(rel, f"{rel}\0unreadable {exc.errno}\n")
            continue
        for name in names:
            count += 1
            if count > MAX_ENTRIES:
                raise TooManyFiles(f"{root} holds more than {MAX_ENTRIES} files")
            full, sub = os.path.join(path, name), f"{rel}/{name}"
            link = os.lstat(full)
            add(sub, _line(sub, link))
            if os.path.islink(full):
                add(sub, f"{sub}\0-> {os.readlink(full)}\n")
            try:
                st = os.stat(full)
            except OSError:
                continue  # a dangling link: its target's name is in the digest
            add(sub, _line(sub, st))
            if os.path.isdir(full) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                stack.append((full, sub))
    return _compose(digest.hexdigest(), count, {p: h.hexdigest() for p, h in parts.items()})


def changed(before: str | None, after: str | None) -> str:
    """What differs between two digests of one version, in words for a refusal."""
    if before is None or after is None:
        return "it was not in the model store" + (" when checked" if before is None else " any more")
    old, new = before.split(" "), after.split(" ")
    if len(old) < 2 or len(new) < 2:
        return "its files differ"
    said = []
    if old[1] != new[1]:
        said.append(f"{old[1]} entries when checked, {new[1]} now")
    old_parts = dict(p.split("=", 1) for p in old[2:] if "=" in p)
    new_parts = dict(p.split("=", 1) for p in new[2:] if "=" in p)
    moved = [p for p in ALL_PARTS if old_parts.get(p) != new_parts.get(p)]
    names = {".": "the version's directory itself", "other": "other entries"}
    if moved:
        said.append("changed: " + ", ".join(names.get(p, p) for p in moved))
    return "; ".join(said) or "its files were replaced or rewritten"


def parse_digest(text: str) -> str:
    """A digest the Kubernetes reader printed, checked for shape (it came through a log)."""
    text = text.strip()
    if not _DIGEST.fullmatch(text) or len(text) > 1000:
        raise OSError(f"the model store reader printed no digest: {text[:200]!r}")
    return text


# A shell function the store reader defines. `tfk_files DIR MAX_ENTRIES MAX_BYTES PARTS`
# prints one line: "tfk-files: <digest>", or "tfk-files: absent|too-many|unsupported: ...|
# error: ...". Only the hashes, counts and the tools' own complaints reach the log: the
# listing (file names come from the training, so they are data) goes into sha256sum, and
# find's own error messages (unreadable directories, link loops) are hashed with it.
# Sorted in the C locale, so the order a directory lists in does not matter.
DIGEST_SCRIPT = r"""tfk_files() {
  if [ ! -e "$1" ]; then echo "tfk-files: absent"; return 0; fi
  for t in find sort sha256sum mktemp; do
    command -v "$t" >/dev/null 2>&1 || { echo "tfk-files: unsupported: the image has no $t"; return 0; }
  done
  # "awk" is often an alternatives link that an image trimmed of /etc/alternatives lacks
  a=""
  for t in awk mawk gawk nawk; do
    if command -v "$t" >/dev/null 2>&1; then a=$t; break; fi
  done
  [ -n "$a" ] || { echo "tfk-files: unsupported: the image has no awk"; return 0; }
  if [ "$(find "$1" -maxdepth 0 -printf ok 2>/dev/null)" != ok ]; then
    echo "tfk-files: unsupported: the image's find has no -printf (GNU findutils)"; return 0
  fi
  t=$(mktemp -d 2>/dev/null) || { echo "tfk-files: unsupported: no writable /tmp"; return 0; }
  r=$( { LC_ALL=C find -L "$1" -printf '%P\t%y\t%D\t%i\t%m\t%s\t%C@\t%T@\t%l\n' 2>&1 \
    | LC_ALL=C "$a" -v n="$2" -v b="$3" -v parts="$4" '
        BEGIN { k = split(parts, p, " "); for (i = 1; i <= k; i++) known[p[i]] = 1 }
        { s += length($0) + 1 }
        NR > n + 1 || s > b { over = 1; exit }
        { path = $0; j = index(path, "\t"); if (j) path = substr(path, 1, j - 1); else path = "?"
          j = index(path, "/"); top = j ? substr(path, 1, j - 1) : path
          print (path == "" ? "." : (top in known ? top : "other")) "\t" $0 }
        END { print (over ? "tfk-over" : "tfk-count " NR - 1) > "/dev/stderr" }' \
    | LC_ALL=C sort > "$t/list"; sha256sum < "$t/list"
    for q in . $4 other; do
      LC_ALL=C "$a" -v q="$q" 'index($0, q "\t") == 1' "$t/list" | sha256sum \
        | "$a" -v q="$q" '{ print $1, q }'
    done; } 2>&1 )
  rm -rf "$t" 2>/dev/null || true
  printf '%s\n' "$r" | LC_ALL=C "$a" '
    $1 == "tfk-over" { over = 1; next }
    $1 == "tfk-count" && NF == 2 { n = $2; next }
    NF == 2 && $2 == "-" && length($1) == 64 && h == "" { h = $1; next }
    NF == 2 && length($1) == 64 { parts = parts " " $2 "=" substr($1, 1, 16); next }
    { bad = bad " " $0 }
    END {
      if (over) print "tfk-files: too-many"
      else if (bad != "" || h == "" || n == "") print "tfk-files: error:" substr(bad, 1, 300)
      else print "tfk-files: " h " " n parts
    }'
}
"""


def reader_files(text: str) -> str | None:
    """The digest in the store reader's log (its first ``tfk-files:`` line); None when the
    version is not there. Raises :class:`OSError` (:class:`TooManyFiles` past the bound)
    when the reader could not take one."""
    for line in text.split("\n"):
        if line.startswith("tfk-files:"):
            found = line.split(":", 1)[1].strip()
            if found == "absent":
                return None
            if found == "too-many":
                raise TooManyFiles(
                    f"the version holds more than {MAX_ENTRIES} files (or {MAX_LISTING_BYTES} bytes of names)"
                )
            if found.startswith(("unsupported:", "error:")):
                raise OSError(f"the model store reader could not take the digest: {found[:300]}")
            return parse_digest(found)
    raise OSError("the model store reader printed no digest of the version's files")
