"""Training files whose parse-time checks passed: a stamp per file content and context.

The DAG processor parses the trainings' DAG file again and again (every
``[dag_processor] min_file_process_interval``, 30 s by default), each time in a new process.
A training file's full check imports and runs the cluster spec's checks (roles, network,
Pod Security, the platform policy, the serving and sweep specs): about two thirds of its
parse (bench/bench_dagfactory_parse.py). Their verdict depends only on:

- the file's bytes, its path and its trainings folder;
- the deployment's defaults the file is read with (:mod:`airflow_tfk.dag_env`) and the
  platform policy section of Airflow's configuration;
- the code that checks: this package's modules (path, size and modification time of each),
  Airflow's version and Python's.

A pass is recorded as an empty file named by the SHA-256 of all of them; a later parse
that finds its stamp builds the DAG from the file without running those checks again. Any
change to any of them is another name, so another full check. Only a pass is stamped: a
broken file is checked, and reported, on every parse. ``airflow-tfk validate`` never uses
stamps.

A stamp only says what the parse would conclude. What guards a run does not depend on it:
the operator checks its spec and the backend the rendered pods against the policy when the
task runs. The stamps live in ``$AIRFLOW_HOME/tfk/checked-trainings``, a directory private
to the user; when it cannot be made so (another owner, group or world access), no stamp is
read or written and every parse checks in full.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys

#: the folder of the stamps, under Airflow's home
STAMPS = os.path.join("tfk", "checked-trainings")
#: at most this many stamps are kept: past it the folder is emptied (each file is then
#: checked once more); a stamp is 0 bytes, so the bound is on directory entries
MAX_STAMPS = 20_000

_code: str | None = None


def _code_fingerprint() -> str:
    """Path, size and modification time of every module of this package but the runtime,
    which runs in a training's processes, never in a parse (an import contract holds it):
    about 1.5 ms."""
    global _code
    if _code is None:
        import airflow

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        digest = hashlib.sha256(f"{sys.version}\0{airflow.__version__}\n".encode())
        runtime = os.path.join(root, "runtime")
        stack = [root]
        while stack:
            folder = stack.pop()
            with os.scandir(folder) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != "__pycache__" and entry.path != runtime:
                            stack.append(entry.path)
                    elif entry.name.endswith((".py", ".json")):
                        info = entry.stat(follow_symlinks=False)
                        digest.update(f"{entry.path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
        _code = digest.hexdigest()
    return _code


def _context() -> str:
    """The deployment's defaults and platform policy a file is checked against."""
    from airflow_tfk import dag_env
    from airflow_tfk._airflow.platform_config import policy_section

    defaults = {name: repr(getattr(dag_env, name)) for name in sorted(vars(dag_env)) if name.isupper()}
    return json.dumps({"dag_env": defaults, "policy": policy_section()}, sort_keys=True, default=repr)


def stamp_name(raw: bytes, path: str, root: str | None) -> str:
    """The stamp of one file's content read at ``path`` from the folder ``root``."""
    digest = hashlib.sha256()
    for part in (_code_fingerprint(), _context(), os.path.abspath(path), str(root)):
        digest.update(part.encode("utf-8", "surrogateescape") + b"\0")
    digest.update(raw)
    return digest.hexdigest()


def _private_dir() -> str | None:
    """The stamps' folder, made if missing; None unless it is this user's own, 0700."""
    from airflow.configuration import AIRFLOW_HOME

    folder = os.path.join(AIRFLOW_HOME, STAMPS)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except (OSError, ValueError):  # not a folder one can make; a NUL in the path
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return folder


def is_checked(name: str) -> bool:
    """Whether a pass with this stamp was recorded."""
    folder = _private_dir()
    if folder is None:
        return False
    try:
        return stat.S_ISREG(os.lstat(os.path.join(folder, name)).st_mode)
    except OSError:
        return False


def mark_checked(name: str) -> None:
    """Record a pass; silently nothing when the folder is not usable (a read-only home)."""
    folder = _private_dir()
    if folder is None:
        return
    try:
        if len(os.listdir(folder)) >= MAX_STAMPS:
            for old in os.listdir(folder):
                os.unlink(os.path.join(folder, old))
        os.close(os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
    except OSError:
        pass
