"""_local_host.run_exports and discard_exports: only plain ASCII integer version directories are set aside."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.spec.cluster import StorageSpec, VolumeSpec
from tests.helpers import local_state, python_cluster

pytestmark = pytest.mark.timeout(60)

# Reports three exports, then fails: "1" is a version; '²'.isdigit() is true and '٣' is
# int() 3, but neither is a version TF Serving or publish would ever read.
EXPORTS_THEN_FAIL = """
import json, os, sys
for name in ("1", "\\u00b2", "\\u0663"):
    path = os.path.join(os.environ["TFK_MODEL_DIR"], "m", name)
    os.makedirs(path)
    print(json.dumps({"tfk": "export", "path": path}), flush=True)
sys.exit(1)
"""


def test_only_integer_version_directories_are_set_aside(tmp_path: Path) -> None:
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), kill_grace_seconds=0.3)
    spec = python_cluster(
        "exports",
        EXPORTS_THEN_FAIL,
        retries_per_index=0,
        storage=StorageSpec(models=VolumeSpec(size="1Gi")),
    )
    ref = backend.create(spec)
    try:
        deadline = time.monotonic() + 30
        while backend.status(ref).tasks[0].phase.value != "Failed":
            assert time.monotonic() < deadline, backend.logs(ref, "worker", 0)
            time.sleep(0.1)
        models = Path(local_state(backend, ref)["volumes"]["models"]) / "m"
        moved = backend.discard_exports(ref, backend.run_exports(ref))
        assert moved == [str((models / "1").resolve())]
        names = sorted(p.name for p in models.iterdir())
        assert "\u00b2" in names and "\u0663" in names and "1" not in names, names
        assert any(n.startswith(".failed-1-") for n in names), names
    finally:
        backend.delete(ref)
