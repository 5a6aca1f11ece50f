"""Run a Python program in the launcher's own process, as its interpreter would have.

The launcher execs its command, so the script is the process and nothing sits in between.
An exec is refused, though, when one argument or environment string is 128 KiB or longer
(see :mod:`airflow_tfk.protocol.exec_limits`): the ``--worker_hosts`` of a TF1 script
reach that at a few thousand workers, and ``TF_CONFIG`` too. When the command is a Python
program of this very interpreter with the same options, the launcher runs it here
instead, with ``sys.argv`` holding the full flags - the same process (PID, signals, exit
status), the same interpreter, no exec and so no limit.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import MutableMapping, Sequence

from airflow_tfk.protocol.exec_limits import PythonCommand, python_command, too_long


def exec_limit() -> int:
    """The most characters one exec string may have on this machine (32 pages)."""
    try:
        page = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        page = 4096
    return 32 * page - 1


def exec_refusal(cmd: Sequence[str], env: MutableMapping[str, str]) -> str | None:
    """Why an exec of ``cmd`` with ``env`` would fail with E2BIG, or None."""
    return too_long(cmd, env.items(), exec_limit())


def own_options(orig_argv: Sequence[str] | None = None) -> tuple[str, ...]:
    """The options this interpreter was started with, before ``-m <launcher>``."""
    argv = list(sys.orig_argv if orig_argv is None else orig_argv)
    if "-m" not in argv:
        return ()
    return tuple(argv[1 : argv.index("-m")])


def same_interpreter(target: PythonCommand, executable: str | None, options: Sequence[str]) -> bool:
    """Whether ``target`` names this interpreter (the same path, not one that merely
    resolves to the same binary: a venv's ``python`` links to the base one but has other
    packages) and the same options, so running it here changes nothing it could see."""
    if executable is None or tuple(target.options) != tuple(options):
        return False
    import shutil

    found = target.interpreter if os.sep in target.interpreter else shutil.which(target.interpreter)
    return found is not None and os.path.abspath(found) == os.path.abspath(executable)


def in_process_target(cmd: Sequence[str]) -> PythonCommand | None:
    """``cmd`` as a Python program this process can run itself, or None."""
    target = python_command(cmd)
    if target is None or not same_interpreter(target, sys.executable, own_options()):
        return None
    return target


def keep_from_children(env: MutableMapping[str, str], limit: int) -> list[str]:
    """Variables too long for any exec: kept in ``os.environ`` (TensorFlow reads
    ``TF_CONFIG`` there) but taken out of the process environment that children inherit,
    so the script's own subprocesses can still start. Returns their names."""
    names = [k for k, v in env.items() if len(k) + 1 + len(v) > limit]
    if env is os.environ:
        for name in names:
            os.unsetenv(name)  # os.environ keeps the value; the C environment drops it
    return names


def run(target: PythonCommand, *, tf1_shim: bool) -> None:
    """Run ``target`` as ``__main__`` with ``sys.argv`` as its interpreter would set it.
    Its ``SystemExit`` and exceptions propagate: the process ends as the script's would."""
    if tf1_shim:
        _load_tf1_shim()
    if target.module is not None:
        sys.argv = [target.module, *target.args]  # run_module puts the module's file first
        runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        return
    script = target.script or ""
    sys.argv = [script, *target.args]
    # `python script.py` puts the script's directory first on sys.path where `-m` put the
    # working directory; run_path adds a directory or zip archive itself.
    if not sys.flags.safe_path and sys.path:
        if os.path.isfile(script):
            sys.path[0] = os.path.dirname(os.path.abspath(script))
        else:
            del sys.path[0]
    runpy.run_path(script, run_name="__main__")


def _load_tf1_shim() -> None:
    """The exec path loads the shim as the interpreter's ``sitecustomize``; here that has
    run already, so the shim is loaded under another name, which installs only its import
    hook (it chains to the next ``sitecustomize`` only as ``sitecustomize``)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf1_shim", "sitecustomize.py")
    spec = importlib.util.spec_from_file_location("airflow_tfk_tf1_shim", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the TF1 shim from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
