"""The local model servers and TensorBoards that outlive their tasks: find them through
their records (``<root>/<namespace>/.serving/<name>/server.json``,
``<root>/<namespace>/.tensorboard/<name>/server.json``) and stop them.

A record only names a process: :func:`airflow_tfk.core.processes.alive` checks the pid *and*
its create time, so a pid reused by another program is never signalled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_tfk.core import processes as _process
from airflow_tfk.serving.spec import default_name

KINDS = {"model-server": ".serving", "tensorboard": ".tensorboard"}


@dataclass(frozen=True)
class LocalServer:
    kind: str  # model-server | tensorboard
    namespace: str
    name: str
    dir: Path
    record: dict[str, Any] | None

    @property
    def running(self) -> bool:
        return _process.alive(self.record) is not None

    def describe(self) -> str:
        r = self.record or {}
        where = f"http://127.0.0.1:{r.get('rest_port') or r.get('port')}" if r else "-"
        state = f"pid {r.get('pid')}" if self.running else "not running"
        return f"{self.kind:12} {self.namespace}/{self.name}  {state}  {where}"


def find(
    root: str, kind: str | None = None, name: str | None = None, namespace: str | None = None
) -> list[LocalServer]:
    """Recorded servers under ``root``; ``name`` matches the server's name, or for a model
    server also its model (``tfs-<model>``, the default server name)."""
    found = []
    try:
        namespaces = sorted(os.listdir(root)) if namespace is None else [namespace]
    except OSError:
        return []
    for ns in namespaces:
        for k, sub in KINDS.items():
            if kind is not None and k != kind:
                continue
            base = Path(root, ns, sub)
            try:
                names = sorted(os.listdir(base))
            except OSError:
                continue
            for n in names:
                record_path = base / n / "server.json"
                if not record_path.exists():
                    continue
                if name is not None and n not in (name, default_name("tfs", name)):
                    continue
                found.append(LocalServer(k, ns, n, base / n, _process.read_record(record_path)))
    return found


def stop(server: LocalServer) -> bool:
    """Stop ``server`` and remove its record; True if a process was stopped."""
    with _process.locked(server.dir):
        return _process.ServerDir(server.dir).stop() is not None
