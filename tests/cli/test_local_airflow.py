"""``airflow-tfk up``: the settings the four components share, and how they stop together.

The components here are a stand-in ``airflow`` executable (a script that records its
argument and sleeps, or exits), so the start, the stop by process group and the "one
exited, stop the rest" rule are checked without an Airflow start-up.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from airflow_tfk.cli.local_airflow import COMPONENTS, LOG_SERVER_PORTS, Services, run, services_environ

BIN = Path(sys.executable).parent

FAKE_AIRFLOW = """#!{python}
import os, subprocess, sys, time
name = sys.argv[1]
if name == "scheduler":  # a task process: in the scheduler's group, deaf to SIGTERM
    task = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                             "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    open(os.path.join({dir!r}, "task.pid"), "w").write(str(task.pid))
open(os.path.join({dir!r}, name + ".pid"), "w").write(str(os.getpid()))
if name == {dies!r}:
    time.sleep(1)
    sys.exit(3)
time.sleep(600)
"""


def fake_airflow(tmp_path: Path, dies: str = "") -> str:
    path = tmp_path / "airflow"
    path.write_text(FAKE_AIRFLOW.format(python=sys.executable, dir=str(tmp_path), dies=dies))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_address_follows_the_options_and_the_users_choices_stay() -> None:
    env = services_environ(
        {"AIRFLOW__CORE__EXECUTOR": "CeleryExecutor", "AIRFLOW__API__PORT": "1"}, "127.0.0.1", 8123
    )
    assert env["AIRFLOW__API__PORT"] == "8123"  # the option wins: the tasks' URL follows it
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:8123/execution/"
    assert env["AIRFLOW__API__BASE_URL"] == "http://127.0.0.1:8123"
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert services_environ({}, "127.0.0.1", 8080)["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert "SimpleAuthManager" in services_environ({}, "127.0.0.1", 8080)["AIRFLOW__CORE__AUTH_MANAGER"]


def _pids(tmp_path: Path) -> dict[str, int]:
    out = {}
    for n in COMPONENTS:
        path = tmp_path / f"{n}.pid"
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():  # a file being written is empty for a moment: not yet
            out[n] = int(text)
    return out


def test_one_component_exiting_stops_the_others(tmp_path: Path) -> None:
    said: list[str] = []
    home = tmp_path / "home"
    code = run(fake_airflow(tmp_path, dies="scheduler"), {}, home, "http://127.0.0.1:9", said.append, 60)
    assert code == 1
    assert any(line.startswith("error: airflow scheduler exited with code 3") for line in said), said
    pids = _pids(tmp_path)
    assert sorted(pids) == sorted(COMPONENTS)
    assert [p for p in pids.values() if _alive_pid(p)] == []
    assert (home / "logs" / "triggerer.log").exists()


def test_stop_ends_every_component_and_what_it_forked(tmp_path: Path) -> None:
    services = Services(fake_airflow(tmp_path), {**os.environ}, tmp_path / "home")
    services.start()
    try:
        deadline = time.monotonic() + 30
        while len(_pids(tmp_path)) < len(COMPONENTS) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert services.exited() is None
        task = psutil.Process(int((tmp_path / "task.pid").read_text()))
    finally:
        services.stop(grace=2)
    assert all(p.poll() is not None for p in services.procs.values())
    # the task process ignored the TERM; the KILL to its group ended it
    deadline = time.monotonic() + 10
    while _alive(task) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(task)


def _alive_pid(pid: int) -> bool:
    try:
        return _alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["up", "--port", "0"], "error: --port: 0 is not a TCP port"),
        (["up", "--dags-folder", "nowhere"], "error: --dags-folder:"),
        (["up", "--host", "a b"], "error: --host: must be an IP address or a host name"),
        (["up", "--host", "evil.example/x?"], "error: --host:"),
        (["up", "--host", "\x1b[2J"], "error: --host:"),
    ],
)
def test_usage_errors_name_the_option(tmp_path: Path, argv: list[str], error: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TFK_"))}
    env["AIRFLOW_HOME"] = str(tmp_path / "home")
    out = subprocess.run(
        [str(BIN / "airflow-tfk"), *argv], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and out.stderr.startswith(error), out.stderr
    assert not (tmp_path / "home").exists()  # nothing prepared before the check


def test_the_config_is_written_once_before_the_components_start(tmp_path: Path) -> None:
    """One airflow.cfg (one JWT secret) for all four: an Airflow command writes it first;
    a command that does not is an error, and a home that has one is left alone."""
    from airflow_tfk.cli.local_airflow import ensure_config

    home = tmp_path / "home"
    home.mkdir()
    writes = tmp_path / "writes"
    writes.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/called\necho '[api_auth]' > {home}/airflow.cfg\n")
    writes.chmod(0o755)
    assert ensure_config(str(writes), {}, home) == 0
    assert (tmp_path / "called").read_text().split() == ["config", "get-value", "core", "executor"]
    (tmp_path / "called").unlink()
    assert ensure_config(str(writes), {}, home) == 0
    assert not (tmp_path / "called").exists()
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    assert ensure_config(str(silent), {}, tmp_path / "other") == 1


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8080"),
        ("::1", "http://[::1]:8080"),
        ("0.0.0.0", "http://127.0.0.1:8080"),  # listens everywhere; the tasks use loopback
        ("::", "http://[::1]:8080"),
        ("airflow.local", "http://airflow.local:8080"),
    ],
)
def test_the_urls_reach_the_api_server_whatever_the_address(host: str, url: str) -> None:
    env = services_environ({}, host, 8080)
    assert env["AIRFLOW__API__HOST"] == host
    assert env["AIRFLOW__API__BASE_URL"] == url
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"{url}/execution/"


# An api-server that cannot bind its port (another process took it after `up` looked): it
# says it started, then exits as uvicorn does on "address already in use".
API_SERVER_LOSES_ITS_PORT = """#!{python}
import os, sys, time
open(os.path.join({dir!r}, sys.argv[1] + ".pid"), "w").write(str(os.getpid()))
if sys.argv[1] == "api-server":
    time.sleep(2.5)  # past one of up's health checks (1 s apart) with the other Airflow up
    sys.exit(1)
time.sleep(600)
"""


class _Health(http.server.BaseHTTPRequestHandler):
    """Another Airflow's api-server: healthy, on the port ours was to use."""

    def do_GET(self) -> None:  # the http.server protocol
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        return


def _other_airflow(port: int) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.timeout(60)  # taken for ready, the run would wait on its stand-ins' sleep
def test_a_port_another_airflow_answers_on_starts_nothing(tmp_path: Path) -> None:
    other = _other_airflow(0)
    port = other.server_address[1]
    said: list[str] = []
    try:
        code = run(fake_airflow(tmp_path), {}, tmp_path / "home", f"http://127.0.0.1:{port}", said.append, 60)
    finally:
        other.shutdown()
        other.server_close()
    assert code == 1
    assert said == [
        f"error: port {port} on 127.0.0.1 is already in use by another process (another Airflow?): "
        "stop it, or choose another port with --port"
    ]
    assert _pids(tmp_path) == {}


@pytest.mark.timeout(60)  # taken for ready, the run would wait on its stand-ins' sleep
def test_another_airflow_answering_after_the_start_is_not_taken_for_ours(tmp_path: Path) -> None:
    """The port is free when ``up`` looks, then another process takes it before our
    api-server binds it: the other one's health answer must not make ``up`` say "ready"
    (with a URL that leads to somebody else's Airflow); ours exits, and ``up`` says so."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    path = tmp_path / "airflow"
    path.write_text(API_SERVER_LOSES_ITS_PORT.format(python=sys.executable, dir=str(tmp_path)))
    path.chmod(0o755)
    said: list[str] = []
    servers: list[http.server.ThreadingHTTPServer] = []

    def take_the_port_once_started() -> None:
        deadline = time.monotonic() + 60
        while not (tmp_path / "api-server.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        servers.append(_other_airflow(port))

    taker = threading.Thread(target=take_the_port_once_started)
    taker.start()
    try:
        code = run(str(path), {}, tmp_path / "home", f"http://127.0.0.1:{port}", said.append, 60)
    finally:
        taker.join()
        for server in servers:
            server.shutdown()
            server.server_close()
    assert servers, "the other Airflow never started"
    assert code == 1
    assert not any("Airflow UI and REST API" in line for line in said), said
    assert any(line.startswith("error: airflow api-server exited with code 1") for line in said), said


def test_the_log_servers_get_ports_of_their_own_unless_chosen() -> None:
    """Airflow's log servers default to 8793 and 8794 on every deployment: two on one
    machine would share them. Held here, as another Airflow would hold them: up's
    components get other ports (free ones, when chosen); a port the user set stays."""
    with socket.socket() as worker_default, socket.socket() as trigger_default:
        for sock, port in ((worker_default, 8793), (trigger_default, 8794)):
            with contextlib.suppress(OSError):  # already held by someone: just as good
                sock.bind(("127.0.0.1", port))
                sock.listen(1)
        env = services_environ({}, "127.0.0.1", 8123)
    ports = [int(env[name]) for name in LOG_SERVER_PORTS]
    assert len(set(ports)) == 2 and not {8793, 8794} & set(ports), ports
    chosen = services_environ({"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": "9001"}, "127.0.0.1", 8123)
    assert chosen["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] == "9001"
