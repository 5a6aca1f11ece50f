"""Spawn a TensorFlow cluster as local subprocesses on free 127.0.0.1 ports.

Test helper only (the product's local backend lives elsewhere). Every task gets the
platform's task environment (``TFK_CLUSTER``, ``TFK_ROLE``, ``TFK_INDEX``, ``TFK_MODE``,
``TFK_CLUSTER_NAME``) and small thread pools, runs in its own process group, and writes
stdout/stderr to files under ``workdir``. :meth:`LocalCluster.close` kills every process
group it started, so no server outlives a test, and then removes ``workdir/tmp``, the
tasks' ``$TMPDIR``: what a killed task leaves there (TensorFlow's autograph modules, which
only an atexit hook removes) never reaches the shared /tmp.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from airflow_tfk.core import processes as _process

REPO = Path(__file__).resolve().parents[2]

#: quiet, small TensorFlow for a 2-core machine
TF_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_NUM_INTEROP_THREADS": "2",
    "TF_NUM_INTRAOP_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "PYTHONUNBUFFERED": "1",
}


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1, chosen as the local backend chooses its
    tasks' (``_process.reserve_ports``): the tasks bind them seconds later, and until then
    no other cluster of this test run, or of the other lane, is given them."""
    return _process.reserve_ports(n)


def task_env(
    cluster: Mapping[str, Sequence[str]],
    role: str,
    index: int,
    mode: str | None,
    name: str = "test",
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("TFK_")}
    env.update(TF_ENV)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["TFK_CLUSTER"] = json.dumps(cluster)
    env["TFK_ROLE"] = role
    env["TFK_INDEX"] = str(index)
    env["TFK_CLUSTER_NAME"] = name
    if mode:
        env["TFK_MODE"] = mode
    env.update(extra or {})
    return env


class LocalCluster:
    """:param roles: role -> replicas (``evaluator`` is not part of the address map).
    :param command: ``(role, index) -> argv`` of each task.
    """

    def __init__(
        self,
        workdir: Path,
        roles: Mapping[str, int],
        command: Callable[[str, int], list[str]],
        mode: str | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "test",
    ):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.roles = dict(roles)
        self.command = command
        self.mode = mode
        self.extra_env = dict(env or {})
        self.name = name
        ports = iter(free_ports(sum(n for r, n in self.roles.items() if r != "evaluator")))
        self.cluster = {
            r: [f"127.0.0.1:{next(ports)}" for _ in range(n)]
            for r, n in self.roles.items()
            if r != "evaluator"
        }
        self.procs: dict[tuple[str, int], subprocess.Popen] = {}
        self._runs: dict[tuple[str, int], int] = {}
        self.tmpdir = self.workdir / "tmp"
        self.tmpdir.mkdir(mode=0o700, exist_ok=True)

    def env(self, role: str, index: int) -> dict[str, str]:
        extra = {"TMPDIR": str(self.tmpdir), **self.extra_env}
        return task_env(self.cluster, role, index, self.mode, self.name, extra)

    def log_path(self, role: str, index: int, stream: str = "out", run: int | None = None) -> Path:
        run = self._runs.get((role, index), 0) if run is None else run
        return self.workdir / f"{role}-{index}.{run}.{stream}"

    def start(self, role: str, index: int) -> subprocess.Popen:
        key = (role, index)
        old = self.procs.get(key)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"{role}:{index} is still running")
        self._runs[key] = self._runs.get(key, -1) + 1
        with (
            open(self.log_path(role, index, "out"), "wb") as out,
            open(self.log_path(role, index, "err"), "wb") as err,
        ):
            proc = subprocess.Popen(
                self.command(role, index),
                env=self.env(role, index),
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                start_new_session=True,
            )
        self.procs[key] = proc
        return proc

    def start_all(self, roles: Sequence[str] = ("ps", "worker", "chief", "evaluator")) -> None:
        for role in roles:
            for i in range(self.roles.get(role, 0)):
                self.start(role, i)

    def stdout(self, role: str, index: int, run: int | None = None) -> str:
        path = self.log_path(role, index, "out", run)
        return path.read_text(errors="replace") if path.exists() else ""

    def stderr(self, role: str, index: int, run: int | None = None) -> str:
        path = self.log_path(role, index, "err", run)
        return path.read_text(errors="replace") if path.exists() else ""

    def wait(self, role: str, index: int, timeout: float) -> int:
        """Exit code of the task; on timeout, fail with the task's logs."""
        proc = self.procs[(role, index)]
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{role}:{index} still running after {timeout}s\n" + self.describe()
            ) from None

    def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}\n" + self.describe())

    def kill(self, role: str, index: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get((role, index))
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def close(self) -> None:
        """Kill every process group this cluster started (ps serve forever by design)."""
        for role, index in list(self.procs):
            self.kill(role, index)
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    def describe(self, tail: int = 3000) -> str:
        parts = []
        for (role, index), proc in self.procs.items():
            parts.append(
                f"--- {role}:{index} rc={proc.poll()} stdout:\n"
                f"{self.stdout(role, index)[-tail:]}\n--- stderr:\n"
                f"{self.stderr(role, index)[-tail:]}"
            )
        return "\n".join(parts)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def python(*args: str) -> list[str]:
    return [sys.executable, *args]
