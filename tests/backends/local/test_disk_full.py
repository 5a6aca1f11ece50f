"""A disk full while a local cluster starts: whichever write fails (a task's record, the
cluster's state before or after its supervisors start, the temp file of an atomic write),
create raises, and nothing is left that looks like a cluster: no state, no temp file, no
process. The failure is injected at each write in turn, as ENOSPC from the file system."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local import records
from airflow_tfk.backends.local.backend import LocalBackend
from tests.helpers import assert_no_processes, python_cluster

pytestmark = pytest.mark.timeout(120)
WRITES = 4  # task.json of two workers, state.json before and after the supervisors start


def _full_at(monkeypatch: pytest.MonkeyPatch, nth: int, where: str) -> None:
    """The ``nth`` write fails with ENOSPC: ``open`` (nothing written) or ``dump`` (the temp
    file half written)."""
    count = [0]
    real_dump = json.dump

    def dump(data: Any, fh: Any, **kw: Any) -> None:
        count[0] += 1
        if count[0] == nth and where == "dump":
            fh.write('{"half": ')
            raise OSError(errno.ENOSPC, "No space left on device")
        real_dump(data, fh, **kw)

    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if count[0] == nth and where == "fsync":
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(records.json, "dump", dump)
    monkeypatch.setattr(records.os, "fsync", fsync)


@pytest.mark.parametrize("where", ["dump", "fsync"])
@pytest.mark.parametrize("nth", range(1, WRITES + 1))
def test_a_disk_full_at_any_write_leaves_nothing_that_looks_live(
    nth: int, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    backend = LocalBackend(str(root), workdir=str(tmp_path), kill_grace_seconds=0.5)
    spec = python_cluster("full", "import time; time.sleep(60)", workers=2)
    _full_at(monkeypatch, nth, where)
    with pytest.raises(OSError) as err:
        backend.create(spec)
    monkeypatch.undo()
    assert err.value.errno == errno.ENOSPC
    ref = ClusterRef("full", "default")
    assert not backend.exists(ref) and backend.clusters(None) == [] and backend.owner(ref) is None
    assert not backend.cluster_dir(ref).exists()
    assert not [p for p in root.rglob("*") if ".tmp." in p.name]
    assert_no_processes(root)
    # and the name is free: the next create starts the cluster
    created = backend.create(spec)
    try:
        assert backend.exists(created)
    finally:
        backend.delete(created)


def test_a_disk_full_while_deleting_leaves_no_live_looking_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    backend = LocalBackend(str(root), workdir=str(tmp_path), kill_grace_seconds=0.5)
    ref = backend.create(python_cluster("full", "import time; time.sleep(60)"))
    _full_at(monkeypatch, 1, "dump")
    backend.delete(ref, "disk full")
    monkeypatch.undo()
    assert not backend.exists(ref) and backend.clusters(None) == []
    assert not [p for p in root.rglob("*") if ".tmp." in p.name]
    assert_no_processes(root)


def test_an_atomic_write_that_fails_keeps_the_old_record_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "status.json"
    records.write(path, records.AttemptStatus(state="running"))
    for where in ("dump", "fsync"):
        _full_at(monkeypatch, 1, where)
        with pytest.raises(OSError):
            records.write(path, records.AttemptStatus(state="exited"))
        monkeypatch.undo()
        assert records.read(path, records.AttemptStatus) == records.AttemptStatus(state="running")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]
