"""A kubeconfig that is not a file (a directory, /dev/zero, a FIFO), is too large or is
missing is a clear error naming where it was given (``--kubeconfig``, ``config_file``),
before the client library reads it: never a traceback, never a hang."""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_tfk.cli import main as cli
from airflow_tfk.core.errors import SpecError
from airflow_tfk.kube.connection import MAX_KUBECONFIG_BYTES, KubeConnection


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "fifo")
    return str(tmp / "fifo")


def _huge(tmp: Path) -> str:
    with open(tmp / "huge", "wb") as fh:
        fh.truncate(MAX_KUBECONFIG_BYTES + 1)
    return str(tmp / "huge")


BAD: dict[str, Callable[[Path], str]] = {
    "directory": lambda tmp: str(tmp),
    "dev-zero": lambda tmp: "/dev/zero",
    "dev-null-char-device": lambda tmp: "/dev/null",
    "fifo": _fifo,
    "huge": _huge,
    "missing": lambda tmp: str(tmp / "nope"),
    "link-to-dev-zero": lambda tmp: (os.symlink("/dev/zero", tmp / "l"), str(tmp / "l"))[1],
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_the_cli_names_a_bad_kubeconfig(kind: str, tmp_path: Path) -> None:
    path = BAD[kind](tmp_path)
    out, err = io.StringIO(), io.StringIO()
    start, cpu = time.monotonic(), time.thread_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["clusters", "list", "--kubeconfig", path])
    # Neither read for long (/dev/zero, a huge file) nor blocked (a FIFO without a writer):
    # this thread's CPU is the bound a busy CI machine cannot move; the wall clock only
    # catches a block (CI once took more than 5 s of it with the machine at load 7).
    assert time.thread_time() - cpu < 5
    assert time.monotonic() - start < 60
    assert code == 1 and err.getvalue().startswith("error: --kubeconfig: "), err.getvalue()
    assert "Traceback" not in err.getvalue()


@pytest.mark.parametrize("kind", sorted(BAD))
def test_the_connection_names_a_bad_config_file(kind: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        KubeConnection(config_file=BAD[kind](tmp_path)).hook  # noqa: B018 - the property builds it
    assert err.value.field == "config_file"
