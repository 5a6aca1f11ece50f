"""Airflow's four components started by ``airflow-tfk up``, and a REST client for them.

The deployment is the documented one (docs/local-airflow.md): SQLite in a temporary
Airflow home, the LocalExecutor, the simple auth manager. The client signs in as a person
would: the password the api-server generated, ``POST /auth/token``, then the JWT as
``Authorization: Bearer``. Every process is started here in its own session and stopped
here by its process group, after a failure too.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiError(AssertionError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status


class RealAirflow:
    def __init__(self, base: Path, dags: list[Path], **extra_env: str) -> None:
        self.base = base
        self.home = base / "home"
        self.local_root = base / "tfk-local"
        self.dags = base / "dags"
        self.dags.mkdir(parents=True, exist_ok=True)
        for dag in dags:  # only the DAGs under test: the dag-processor parses them in seconds
            (self.dags / dag.name).symlink_to(dag)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TFK_"))}
        self.env = {
            **clean,
            "AIRFLOW_HOME": str(self.home),
            "TFK_LOCAL_ROOT": str(self.local_root),
            "TFK_BACKEND": "local",
            # Free ports for the log servers, so two deployments on one machine do not clash.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            **extra_env,
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.groups: set[int] = set()
        self._token: str | None = None

    @property
    def log(self) -> Path:
        return self.base / "up.log"

    def start(self, timeout: float = 600) -> None:
        # The database migrated once per test process, marked as `airflow-tfk` marks a
        # home it migrated: `up` skips the migration (tests/cli/test_airflow.py runs it).
        from importlib.metadata import version

        from airflow_tfk.cli.main import MIGRATED_MARKER
        from tests.helpers import migrated_airflow_home

        migrated_airflow_home(self.home)
        (self.home / MIGRATED_MARKER).write_text(version("apache-airflow") + "\n")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(BIN / "airflow-tfk"), "up", "--port", str(self.port), "--dags-folder", str(self.dags)],
                env=self.env,
                cwd=str(self.base),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.groups.add(self.proc.pid)
        try:
            wait_for("the api-server's health check", self._healthy, timeout, self)
            self._record_groups()
        except BaseException:
            self.stop()
            raise

    def _healthy(self) -> bool:
        self._record_groups()
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=30) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _record_groups(self) -> None:
        """The components' process groups (each its own), kept for the stop."""
        assert self.proc is not None
        try:
            for child in psutil.Process(self.proc.pid).children():
                self.groups.add(os.getpgid(child.pid))
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"airflow-tfk up exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, chars: int = 4000) -> str:
        parts = [f"--- up.log\n{self.log.read_text(errors='replace')[-chars:]}"]
        for name in ("api-server", "scheduler", "dag-processor", "triggerer"):
            path = self.home / "logs" / f"{name}.log"
            if path.exists():
                parts.append(f"--- {name}.log\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """TERM to ``airflow-tfk up`` (it stops its components), then KILL to every
        process group it or its components had."""
        if self.proc is None:
            return
        self._record_groups()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        for group in self.groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait(timeout=30)

    # -- REST -------------------------------------------------------------------------
    def token(self) -> str:
        """A JWT for the configured admin, through the simple auth manager's password flow."""
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        body = json.dumps({"username": "admin", "password": passwords["admin"]}).encode()
        req = urllib.request.Request(
            f"{self.url}/auth/token", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return str(json.load(resp)["access_token"])

    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        if self._token is None and token is None:
            self._token = self.token()
        headers = {"Authorization": f"Bearer {token or self._token}", "Content-Type": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}/api/v2{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise ApiError(method, path, exc.code, exc.read().decode(errors="replace")) from None
        return json.loads(text) if text else None

    def dag_parsed(self, dag_id: str) -> bool:
        try:
            self.api("GET", f"/dags/{dag_id}")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def unpause(self, dag_id: str, paused: bool = False) -> None:
        self.api("PATCH", f"/dags/{dag_id}", {"is_paused": paused})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return dict(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"))

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"])


def wait_for(
    what: str, probe: Callable[[], T], timeout: float, airflow: RealAirflow | None = None, every: float = 1.0
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        if airflow is not None:
            airflow.check_alive()
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = f"\n{airflow.tail()}" if airflow is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{tail}")
        time.sleep(every)
