"""What only this machine can check before a local cluster starts: the commands exist
and can run here, the ports are free; and where a failed run's exports are set aside.

A command, script or working directory this machine lacks, or a fixed port taken here, is
a :class:`~airflow_tfk.core.errors.LocalMachineError` naming the spec field (or backend option)
and the executable, script or port: not a :class:`SpecError`, since the same spec may run
on Kubernetes, where the image brings the command.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_tfk.backends.base import ClusterRef, RunExport
from airflow_tfk.backends.local.files import LOCALHOST, _port_free
from airflow_tfk.core import bounded_files
from airflow_tfk.core import processes as _process
from airflow_tfk.core.errors import LocalMachineError, SpecError
from airflow_tfk.protocol.digits import is_plain_int
from airflow_tfk.protocol.progress import parse_event
from airflow_tfk.spec.cluster import TFClusterSpec

if TYPE_CHECKING:
    from airflow_tfk.backends.local.records import ClusterState

log = logging.getLogger("airflow_tfk.backends.local.backend")

_PYTHONS = ("python", "python3")
# The key of a task's metrics port among the allocated ports (``metrics:worker-0``).
METRICS_PORT_KEY = "metrics:"


class LocalHostChecks:
    fixed_ports: bool
    root: str

    def _cluster(self, ref: ClusterRef) -> ClusterState | None:
        raise NotImplementedError

    def cluster_dir(self, ref: ClusterRef) -> Path:
        raise NotImplementedError

    def _resolve_commands(self, spec: TFClusterSpec, workdir: str) -> dict[str, list[str]]:
        """argv (without the legacy flags) of each role; checks what only this machine can."""
        if not os.path.isdir(workdir):
            raise LocalMachineError(
                "workdir", "the local backend's working directory does not exist", workdir
            )
        out: dict[str, list[str]] = {}
        for role, rspec in spec.roles().items():
            cmd_field = f"{role}.command" if rspec.command is not None else "command"
            args_field = f"{role}.args" if rspec.args is not None else "args"
            command = list(rspec.command if rspec.command is not None else spec.command)
            args = list(rspec.args if rspec.args is not None else spec.args)
            exe = command[0]
            path_env = rspec.env.get("PATH") or spec.env.get("PATH") or os.environ.get("PATH")
            is_python = exe in _PYTHONS
            if is_python:
                resolved = sys.executable
            elif "/" in exe:
                resolved = exe if os.path.isabs(exe) else os.path.join(workdir, exe)
                if not os.path.isfile(resolved):
                    raise LocalMachineError(
                        cmd_field, f"executable {exe!r} does not exist (resolved against {workdir})", exe
                    )
                if not os.access(resolved, os.X_OK):
                    raise LocalMachineError(cmd_field, f"{exe!r} is not executable on this machine", exe)
                is_python = os.path.basename(resolved).startswith("python")
            else:
                found = shutil.which(exe, path=path_env)
                if found is None:
                    raise LocalMachineError(
                        cmd_field, f"executable {exe!r} is not on PATH on this machine", exe
                    )
                resolved = found
                is_python = exe.startswith("python")
            argv = [resolved, *command[1:], *args]
            if is_python:  # `python train.py`: the script must be here too
                script = argv[1] if len(argv) > 1 else None
                if script and script.endswith(".py") and not script.startswith("-"):
                    where = f"{cmd_field}[1]" if len(command) > 1 else f"{args_field}[0]"
                    full = script if os.path.isabs(script) else os.path.join(workdir, script)
                    if not os.path.isfile(full):
                        raise LocalMachineError(
                            where, f"script {script!r} does not exist (resolved against {workdir})", script
                        )
            out[role] = argv
        return out

    def _allocate_ports(self, spec: TFClusterSpec) -> dict[str, int]:
        """One port per task of the cluster map (``role-index`` -> port), and with a
        ``metrics_port`` one more per task for its metrics (``metrics:role-index`` -> port).

        A pod has an address of its own, so every pod of a training (and of every other
        training) can serve metrics on the same ``metrics_port``; on one machine they would
        all bind the same port, and a scraper would read whichever task bound it first,
        perhaps another training's. So each local task gets a port of its own.
        """
        names = [f"{r}-{i}" for r, s in spec.cluster_roles().items() for i in range(s.replicas)]
        if spec.metrics_port is not None:
            names += [
                f"{METRICS_PORT_KEY}{r}-{i}" for r, s in spec.roles().items() for i in range(s.replicas)
            ]
        if self.fixed_ports:
            return self._fixed_ports(spec, names)
        # Chosen through this user's register, so that a cluster (or a local server) started
        # next is not given a port whose task has not bound it yet (_process.reserve_ports).
        return dict(zip(names, _process.reserve_ports(len(names)), strict=True))

    @staticmethod
    def _fixed_ports(spec: TFClusterSpec, names: list[str]) -> dict[str, int]:
        """Task *k* of the cluster map on ``port + k``; with metrics, task *k* of every role
        serves them on ``metrics_port + k``. Every one must be free here."""
        ports: dict[str, int] = {}
        ranges: dict[str, tuple[int, int]] = {}
        for field, base in (("port", spec.port), ("metrics_port", spec.metrics_port)):
            if base is None:
                continue
            own = [n for n in names if n.startswith(METRICS_PORT_KEY) == (field == "metrics_port")]
            last = base + len(own) - 1
            if last > 65535:
                raise SpecError(
                    field,
                    f"with fixed ports the {len(own)} tasks need ports {base}-{last}, beyond 65535",
                    base,
                )
            ranges[field] = (base, last)
            ports.update({name: base + k for k, name in enumerate(own)})
        if len(ranges) == 2:
            (p0, p1), (m0, m1) = ranges["port"], ranges["metrics_port"]
            if p0 <= m1 and m0 <= p1:
                raise LocalMachineError(
                    "metrics_port",
                    f"with fixed ports the tasks' metrics ports {m0}-{m1} overlap their TensorFlow "
                    f"ports {p0}-{p1} (port) on this one machine: choose ports further apart",
                    spec.metrics_port,
                )
        for name, port in ports.items():
            if not _port_free(port):
                field = "metrics_port" if name.startswith(METRICS_PORT_KEY) else "port"
                task = name.removeprefix(METRICS_PORT_KEY)
                raise LocalMachineError(
                    field,
                    f"{LOCALHOST}:{port} (for task {task}) is "
                    "already in use on this machine: stop what listens there, "
                    "choose another port, or let the local backend pick free "
                    "ports (fixed_ports=False)",
                    port,
                )
        return ports

    def run_exports(self, ref: ClusterRef) -> list[RunExport]:
        """Each ``<model>/<version>`` directory the run's tasks reported exporting (their
        ``{"tfk": "export"}`` log lines, every attempt's). Only directories inside the
        cluster's own volumes or claims count, whatever a log line says."""
        state = self._cluster(ref)
        roots = [Path(p).resolve() for p in (state.volumes if state else {}).values()]
        logs = self.cluster_dir(ref) / "logs"
        if not roots or not logs.is_dir():
            return []
        found: dict[str, RunExport] = {}
        for log_file in sorted(logs.glob("*.log")):
            try:  # streamed a line at a time: a log of any size costs one line of memory
                for line in bounded_files.iter_lines(log_file, root=self.root):
                    event = parse_event(line, "export") if '"export"' in line else None
                    if event is None or not isinstance(event.get("path"), str):
                        continue
                    path = Path(event["path"]).resolve()
                    if is_plain_int(path.name) and any(path.is_relative_to(r) for r in roots):
                        found.setdefault(str(path), RunExport(str(path)))
            except OSError as exc:
                log.warning("local backend: not reading the log %s: %s", log_file, exc)
        return list(found.values())

    def discard_exports(self, ref: ClusterRef, exports: list[RunExport]) -> list[str]:
        """Rename each exported ``<model>/<version>`` to ``<model>/.failed-<version>-<uid>``:
        TF Serving and :func:`publish` only see integer names."""
        state = self._cluster(ref)
        uid = (state.uid if state else "x")[:8]
        moved = []
        for export in exports:
            path = Path(export.path)
            if not path.is_dir():
                continue
            with contextlib.suppress(OSError):
                os.replace(path, path.with_name(f".failed-{path.name}-{uid}"))
                moved.append(str(path))
        return moved
