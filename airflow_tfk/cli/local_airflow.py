"""``airflow-tfk up``: Airflow's four components on this machine, with the provider.

The api-server, scheduler (LocalExecutor), dag-processor and triggerer run as child
processes with the environment of ``airflow-tfk airflow`` (``local_env``): the same Airflow
home, DAGs folder and local root, so a model server one of them starts is one
``airflow-tfk stop`` finds. Each component logs to ``<home>/logs/<component>.log``.

Why four processes and not ``airflow standalone``: a deferred training waits in the
triggerer, and a person must be able to see that process, its log and the task's
``deferred`` state apart from the scheduler's; the components also stop together here,
by process group, when one of them dies, instead of leaving the others running.

The REST API uses Airflow's simple auth manager with its own password flow: the
api-server writes the password of each configured user (``admin`` unless
``AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS`` says otherwise) to
``<home>/simple_auth_manager_passwords.json.generated``; ``POST /auth/token`` with that
user and password returns the JWT that ``Authorization: Bearer`` carries.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from airflow_tfk.core.local_env import LocalAirflowEnv

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"


def check_host(host: str) -> str | None:
    """Why ``host`` cannot be the api-server's address (None when it can): an IP address or
    a DNS host name, as it goes into the URLs the tasks and the UI use."""
    import ipaddress
    import re

    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if len(host) <= 253 and re.fullmatch(
        r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*", host
    ):
        return None
    return "must be an IP address or a host name"


def url_host(host: str) -> str:
    """``host`` as the URLs write it: an IPv6 address in brackets, and a wildcard address
    (listen on every interface) as this machine's loopback, which the tasks reach."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.is_unspecified:
        ip = ipaddress.ip_address("::1" if ip.version == 6 else "127.0.0.1")
    return f"[{ip}]" if ip.version == 6 else str(ip)


def services_environ(env: Mapping[str, str], host: str, port: int) -> dict[str, str]:
    """The settings the four components must agree on, added to ``env`` (the user's own
    settings win, except the address, which the options give).

    Tasks reach the api-server through ``execution_api_server_url``, so it follows the
    port; the LocalExecutor runs tasks as processes of the scheduler, the only executor
    that needs nothing more than this machine.
    """
    out = dict(env)
    url = f"http://{url_host(host)}:{port}"
    out["AIRFLOW__API__HOST"] = host
    out["AIRFLOW__API__PORT"] = str(port)
    out["AIRFLOW__API__BASE_URL"] = url
    out["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = f"{url}/execution/"
    out.setdefault("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    out.setdefault("AIRFLOW__CORE__AUTH_MANAGER", SIMPLE_AUTH_MANAGER)
    # One api-server worker: each extra one costs a whole Airflow import of memory and
    # start-up time on a laptop, for load a single person does not make.
    out.setdefault("AIRFLOW__API__WORKERS", "1")
    # The first call of a task builds the execution API (about a minute on a busy
    # two-core machine); Airflow's 5 s default fails that task although nothing is wrong.
    out.setdefault("AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT", "120")
    # The scheduler's and the triggerer's log servers listen on fixed ports by default
    # (8793, 8794): a second Airflow on this machine (another checkout, a test run) could
    # not bind them, and its UI would fetch a running task's log from the first one's
    # server. Ports of this deployment's own, unless the user chose them.
    for name in LOG_SERVER_PORTS:
        if not out.get(name):
            out[name] = str(_free_port())
    return out


LOG_SERVER_PORTS = ("AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT", "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT")


def _free_port() -> int:
    from airflow_tfk.core import processes as _process

    return _process.free_port()


def ensure_config(airflow: str, env: Mapping[str, str], home: Path) -> int:
    """Have ``airflow.cfg`` written before the components start.

    The first Airflow command of a home writes it, with a random JWT secret; four
    components started at once without it would each write their own secret, and the
    api-server would refuse the tokens the scheduler gives its tasks.
    """
    config = Path(env.get("AIRFLOW_CONFIG") or home / "airflow.cfg")
    if config.exists():
        return 0
    out = subprocess.run(
        [airflow, "config", "get-value", "core", "executor"],
        env=dict(env),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0 or not config.exists():
        print(f"error: Airflow did not write {config}: {out.stderr[-2000:]}", file=sys.stderr)
        return out.returncode or 1
    return 0


def passwords_file(env: Mapping[str, str], home: Path) -> Path:
    given = env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE")
    return Path(given) if given else home / PASSWORDS_FILE


def wait_healthy(
    url: str, alive: Callable[[], str | None], timeout: float, ours: Callable[[], bool] | None = None
) -> str | None:
    """Until the api-server answers its health check: None, else why not (a component
    that exited, or the time it took). With ``ours``, an answer counts only once ``ours()``
    says our own api-server listens: a health check answered on the port says only that
    *some* Airflow answers there, and a second one on this machine answers it too."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = alive()
        if dead is not None:
            return dead
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=30) as resp:
                if resp.status == 200 and (ours is None or ours()):
                    return None
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    return f"the api-server did not answer {url}/api/v2/monitor/health within {timeout:.0f} s"


def port_taken(url: str) -> str | None:
    """Why the api-server cannot listen where ``url`` says (None when nothing answers
    there): on a taken port it would exit while the other process answers in its place."""
    import socket
    import urllib.parse

    where = urllib.parse.urlsplit(url)
    if where.hostname is None or where.port is None:
        return None
    try:
        with socket.create_connection((where.hostname, where.port), timeout=1):
            pass
    except OSError:
        return None
    return (
        f"port {where.port} on {where.hostname} is already in use by another process "
        "(another Airflow?): stop it, or choose another port with --port"
    )


class Services:
    """The four components as children of this process, each in its own process group so
    it is stopped with whatever it forked (the executor's task processes included)."""

    def __init__(self, airflow: str, env: Mapping[str, str], home: Path) -> None:
        self.airflow = airflow
        self.env = dict(env)
        self.logs = home / "logs"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        for name in COMPONENTS:
            with open(self.logs / f"{name}.log", "ab") as log:
                self.procs[name] = subprocess.Popen(
                    [self.airflow, name],
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

    def listens(self, url: str) -> bool:
        """Does our api-server (or a process it started) listen on ``url``'s port?"""
        import urllib.parse

        import psutil

        from airflow_tfk.core import processes as _process

        port = urllib.parse.urlsplit(url).port
        proc = self.procs.get("api-server")
        if port is None or proc is None:
            return True
        try:
            return _process.listens_on(psutil.Process(proc.pid), port)
        except psutil.Error:
            return False

    def exited(self) -> str | None:
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is not None:
                return f"airflow {name} exited with code {code}; see {self.logs / (name + '.log')}"
        return None

    def stop(self, grace: float = 30.0) -> None:
        """TERM to every group, KILL to any still there after ``grace`` seconds."""
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # Task processes the scheduler forked share its group and may outlive it.
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(
    airflow: str,
    env: Mapping[str, str],
    home: Path,
    url: str,
    say: Callable[[str], None],
    start_timeout: float = 600.0,
) -> int:
    """Start the four components, say where to find them, and keep them running until
    SIGINT/SIGTERM or until one exits (then the others are stopped too: half a
    deployment looks alive and runs nothing). Nothing starts when another process already
    answers on the api-server's port, and "ready" means our own api-server answers."""
    taken = port_taken(url)
    if taken is not None:
        say(f"error: {taken}")
        return 1
    services = Services(airflow, env, home)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        services.start()
        say(f"started {', '.join(COMPONENTS)}; logs: {services.logs}/<component>.log")
        problem = wait_healthy(
            url,
            lambda: services.exited() or ("stopped" if stopping else None),
            start_timeout,
            lambda: services.listens(url),
        )
        if problem is None:
            for line in _ready_lines(env, home, url):
                say(line)
            while not stopping:
                problem = services.exited()
                if problem is not None:
                    break
                time.sleep(1)
        if problem is not None and not stopping:
            say(f"error: {problem}; stopping the other components")
            return 1
        return 0
    finally:
        services.stop()
        say("stopped Airflow's components")
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ready_lines(env: Mapping[str, str], home: Path, url: str) -> list[str]:
    users = env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
    user = users.split(",")[0].split(":")[0].strip() or "admin"
    return [
        f"Airflow UI and REST API: {url}  (user {user!r}, password in {passwords_file(env, home)})",
        f"a token for the REST API: curl -s -X POST {url}/auth/token -H 'Content-Type: application/json' "
        f'-d \'{{"username": "{user}", "password": "<password>"}}\'',
        "trainings defer to the triggerer with AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=true",
        "Ctrl-C stops all four",
    ]


def main_up(
    where: LocalAirflowEnv,
    port: int,
    host: str,
    prepare: Callable[[LocalAirflowEnv, dict[str, str]], tuple[str, int]],
) -> int:
    """The ``up`` command once its arguments are read; ``prepare`` says which environment
    this is and prepares its database, as ``airflow-tfk airflow`` does (``airflow db migrate``
    once per Airflow version), returning the ``airflow`` executable and its exit code."""
    env = services_environ(where.environ(os.environ), host, port)
    airflow, code = prepare(where, env)
    if code != 0:
        return code
    code = ensure_config(airflow, env, where.airflow_home)
    if code != 0:
        return code

    def say(line: str) -> None:
        print(f"airflow-tfk: {line}", file=sys.stderr, flush=True)

    return run(airflow, env, where.airflow_home, env["AIRFLOW__API__BASE_URL"], say)
