"""Test-session environment: a throw-away Airflow home (SQLite), no example DAGs, quiet TF
(set at import, before any test module imports Airflow); Ctrl-C that always stops the run
(a guard on the SIGINT handler around every test); and the local-backend root the
operator, sensor and trigger tests share (their helpers: tests/helpers.py).
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_HOME = tempfile.mkdtemp(prefix="tfk-airflow-home-")
_SESSION_HOME = "TFK_TEST_SESSION_HOME"  # the home this file chose, for xdist's workers
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("AIRFLOW_HOME") == os.environ.get(_SESSION_HOME):
    # A pytest-xdist worker (the fast lane's -n 2) inherits the controller's environment,
    # these defaults included: it takes a home of its own, so two processes never share
    # one SQLite database, log folder or local-backend root.
    if os.environ.get("TFK_LOCAL_ROOT") == os.path.join(os.environ["AIRFLOW_HOME"], "tfk-local"):
        del os.environ["TFK_LOCAL_ROOT"]
    del os.environ["AIRFLOW_HOME"]
os.environ.setdefault("AIRFLOW_HOME", _HOME)
if os.environ["AIRFLOW_HOME"] == _HOME:
    os.environ[_SESSION_HOME] = _HOME
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault(
    "AIRFLOW__CORE__DAGS_FOLDER", os.path.join(os.path.dirname(os.path.dirname(__file__)), "dags")
)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TFK_LOCAL_ROOT", os.path.join(_HOME, "tfk-local"))


def pytest_configure(config: pytest.Config) -> None:
    # A run started in the background of a non-interactive shell (`pytest ... &` in a
    # script: scripts/test.sh's node lane) inherits SIGINT ignored, and Python then never
    # installs the handler that turns Ctrl-C into KeyboardInterrupt. Put it back, so
    # Ctrl-C (or the script's `kill -INT`) stops the run and its teardown still runs.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_interrupted: list[bool] = []


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    # Called before the session's tear-down: from here on a fixture may hold off further
    # interrupts on purpose (tests/k8s_node/conftest.py), and the guard below lets it.
    _interrupted.append(True)


@pytest.fixture(autouse=True)
def _sigint_handler_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """Ctrl-C must keep stopping the run: a test (or a fixture it uses, or code it runs in
    this process) that replaces the SIGINT handler and does not put it back fails here,
    by name, and the handler is restored for the tests after it."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before and not _interrupted:
        signal.signal(signal.SIGINT, before)
        pytest.fail(
            f"{request.node.nodeid} left the SIGINT handler replaced ({before!r} -> {after!r}); "
            "Ctrl-C would no longer stop the test run",
            pytrace=False,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the throw-away Airflow home; a failed or interrupted session keeps it, for
    its logs, and says where (nobody finds it in /tmp otherwise)."""
    import shutil

    clean = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    if clean or os.environ.get("AIRFLOW_HOME") != _HOME:  # unused when AIRFLOW_HOME was set
        shutil.rmtree(_HOME, ignore_errors=True)
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"the session's Airflow home is kept for its logs: {_HOME} (remove it when done)")


# -- the local-backend root of the operator, sensor and trigger tests ----------------------
# (their helpers are an importable module: tests/helpers.py)


@pytest.fixture
def local_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "tfk-local"
    monkeypatch.setenv("TFK_LOCAL_ROOT", str(root))
    yield root
    from airflow_tfk.backends.local.backend import LocalBackend

    backend = LocalBackend(str(root))
    for state in root.glob("*/*/state.json"):
        from airflow_tfk.backends.base import ClusterRef

        backend.delete(ClusterRef(state.parent.name, state.parent.parent.name))


#: one-line figures a test wants in the run's summary even when it passes under -q (e.g.
#: how many docs examples the site's pages hold): the ``summary_line`` fixture adds them
_SUMMARY = pytest.StashKey[list[str]]()


@pytest.fixture
def summary_line(request: pytest.FixtureRequest):
    """Call with a line of text: printed in the run's "figures" section at the end."""
    return request.config.stash.setdefault(_SUMMARY, []).append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = terminalreporter.config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)
