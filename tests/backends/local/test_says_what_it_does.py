"""The local backend names, at create time, what differs from a pod (issue 13, item 2).

A newcomer's spec with an image that does not exist "succeeds" locally; the create-time
log line is what tells them the image was not used, which Python ran the tasks, and which
directory relative paths resolved against.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec

pytestmark = pytest.mark.timeout(60)

FAST = {"kill_grace_seconds": 1.0, "restart_backoff_seconds": 0.05, "poll_interval": 0.05}


def test_create_logs_ignored_image_python_and_working_directory(tmp_path: Path, caplog):
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "train.py").write_text("import time\ntime.sleep(30)\n")
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(workdir), **FAST)
    spec = TFClusterSpec(
        name="says",
        image="registry.invalid/does-not-exist:0",
        command=("python", "train.py"),  # relative: resolved against the working directory
        mode="all_reduce",
        worker=RoleSpec(replicas=1),
    )
    caplog.set_level(logging.INFO, logger="airflow_tfk.backends.local.backend")
    ref = backend.create(spec)
    try:
        lines = [r.getMessage() for r in caplog.records if "ignoring image" in r.getMessage()]
        assert len(lines) == 1, caplog.text
        line = lines[0]
        assert "registry.invalid/does-not-exist:0" in line
        assert sys.executable in line  # `python` became this interpreter
        assert f"working directory {workdir} " in line

        caplog.clear()
        backend.create(spec)  # a reattach starts nothing, so it has nothing new to say
        assert "ignoring image" not in caplog.text
    finally:
        backend.delete(ref)
