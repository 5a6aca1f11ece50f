"""Airflow's own services as processes, for the browser test: api-server, scheduler,
dag-processor and triggerer with the LocalExecutor, as docker-compose.yaml runs them.

What docker-compose.yaml configures and applies without Docker is taken from it (the
executor, the auth manager with everyone admin, the API secrets, the scheduler's health
check, Postgres as the database); what needs Docker is replaced: Postgres is Debian's,
started here in a temporary directory on a free loopback port, and k3s with its
kubernetes connection gives way to the local backend. (SQLite was tried first: with four
services writing to it, the api-server stalled for ~60 s on its lock and the first task
failed to start.) Every process is started here, in its own session, and stopped here
by its pid (the whole process group).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
# Compose settings that only make sense inside its Docker network or for its Postgres/k3s.
_DOCKER_ONLY = {
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW_CONN_KUBERNETES_DEFAULT",
    "TFK_BACKEND",
    "TFK_KUBERNETES_CONN_ID",
    "TFK_NAMESPACE",
    "TFK_IMAGE",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def compose_environment() -> dict[str, str]:
    """The Airflow settings of docker-compose.yaml that apply outside Docker."""
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    env = compose["x-airflow-common"]["environment"]
    return {k: str(v) for k, v in env.items() if k not in _DOCKER_ONLY}


class Postgres:
    """A throw-away PostgreSQL server (Debian's binaries) owned by this test."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins:
            raise RuntimeError("PostgreSQL is not installed (scripts/browser-deps.sh installs it)")
        self.bin = Path(bins[-1]).parent
        self.port = free_port()
        # Not under pytest's 0700 tmp dirs: the server runs as the postgres user.
        self.dir = Path(tempfile.mkdtemp(prefix="tfk-browser-pg-"))
        os.chmod(self.dir, 0o755)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/postgres"

    def start(self, log_path: Path) -> None:
        data = self.dir / "data"
        data.mkdir()
        shutil.chown(data, "postgres", "postgres")
        shutil.chown(self.dir, "postgres", "postgres")
        as_postgres = {"user": "postgres", "group": "postgres", "extra_groups": []}
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(data), "-U", "airflow", "-A", "trust", "--no-sync"],
            check=True,
            capture_output=True,
            timeout=120,
            cwd=str(self.dir),
            **as_postgres,  # type: ignore[arg-type]
        )
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.dir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",  # a test database: speed over durability
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=str(self.dir),
                **as_postgres,  # type: ignore[arg-type]
            )
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
            )
            if ready.returncode == 0:
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"postgres did not start: {log_path.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # "fast" shutdown
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class AirflowServices:
    def __init__(self, base: Path, dags_folder: Path, artifacts: Path) -> None:
        self.postgres = Postgres()
        self.base = base
        self.artifacts = artifacts
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.local_root = base / "tfk-local"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TFK_"))}
        self.env = {
            **clean,
            **compose_environment(),
            "AIRFLOW_HOME": str(base / "home"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.postgres.url,
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(free_port()),
            # The log servers' defaults (8793, 8794) are fixed: another Airflow on this
            # machine (the other test lane's scheduler) holds them, and the UI would then
            # fetch a task's log from a server that is not this deployment's.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__CORE__PARALLELISM": "4",
            # On a busy 2-core machine the api-server answers a task's first call slowly;
            # the default 5 s made the first task fail although the server was fine.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
            "TFK_BACKEND": "local",
            "TFK_LOCAL_ROOT": str(self.local_root),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PATH": f"{BIN}{os.pathsep}{clean.get('PATH', '')}",
        }

    def start(self) -> None:
        (self.base / "home").mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        try:
            self._start()
        except BaseException:
            self.stop()  # nothing half-started is left behind
            raise

    def _start(self) -> None:
        self.postgres.start(self.artifacts / "postgres.log")
        with open(self.artifacts / "db-migrate.log", "wb") as log:
            subprocess.run(
                [str(BIN / "airflow"), "db", "migrate"],
                env=self.env,
                stdout=log,
                stderr=log,
                check=True,
                timeout=300,
            )
        for name in SERVICES:
            with open(self.artifacts / f"{name}.log", "wb") as log:
                self.procs[name] = subprocess.Popen(
                    [str(BIN / "airflow"), name],
                    env=self.env,
                    cwd=str(self.base),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped as a whole
                )

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                tail = (self.artifacts / f"{name}.log").read_text(errors="replace")[-3000:]
                raise AssertionError(f"airflow {name} exited with {proc.returncode}:\n{tail}")

    def wait_ready(self, timeout: float = 300) -> None:
        """Until the UI's API and the execution API (what tasks call) both answer.

        The execution API is built on its first request (measured: ~1 min under load, with
        every other request of the single worker waiting); asking here keeps that out of
        the first task's way.
        """
        deadline = time.monotonic() + timeout
        for path in ("/api/v2/monitor/health", "/execution/health"):
            while True:
                self.check_alive()
                try:
                    with urllib.request.urlopen(f"{self.url}{path}", timeout=120) as resp:
                        if resp.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError(f"the api-server did not answer {path} within {timeout}s")
                time.sleep(1)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            # Task processes the executor forked live in the same group; none may survive.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.postgres.stop()
