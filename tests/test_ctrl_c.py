"""Ctrl-C stops the test run (tests/conftest.py): a test that leaves the SIGINT handler
replaced fails by name and the next test has it back, and a session that starts with
SIGINT ignored (``pytest ... &`` in a script: scripts/test.sh's node lane) gets Python's
KeyboardInterrupt handler back. A failed session says where it kept its Airflow home; a
passing one leaves none. Each case runs a small pytest session of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(120)


def run_session(tmp_path: Path, source: str, ignore_sigint: bool = False) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(source)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the session's Airflow home goes there
    env.pop("AIRFLOW_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q"]
        + [str(tmp_path / "test_probe.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None,
    )


def test_a_test_that_leaves_sigint_replaced_fails_by_name(tmp_path: Path) -> None:
    out = run_session(
        tmp_path,
        "import signal\n\n"
        "def test_replaces():\n"
        "    signal.signal(signal.SIGINT, lambda *_: None)\n\n"
        "def test_after():\n"
        "    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n",
    )
    assert out.returncode == 1, out.stdout
    assert "ERROR at teardown of test_replaces" in out.stdout, out.stdout
    assert "test_probe.py::test_replaces left the SIGINT handler replaced" in out.stdout, out.stdout
    assert "2 passed, 1 error" in out.stdout, out.stdout  # test_after found it restored
    # A failed session keeps its Airflow home for the logs, and says where.
    kept = [line for line in out.stdout.splitlines() if "Airflow home is kept" in line]
    assert len(kept) == 1 and Path(kept[0].split(": ", 1)[1].split()[0]).is_dir(), out.stdout


def test_a_session_started_with_sigint_ignored_gets_keyboardinterrupt_back(tmp_path: Path) -> None:
    out = run_session(
        tmp_path,
        "import signal\n\n"
        "def test_handler():\n"
        "    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n",
        ignore_sigint=True,
    )
    assert out.returncode == 0, out.stdout
    # ... and a passing one removes its Airflow home.
    assert not list(tmp_path.glob("tfk-airflow-home-*")), out.stdout
