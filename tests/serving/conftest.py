"""Shared, slow-to-start things of the serving tests, started early and in parallel:
the tiny SavedModels (built in a subprocess, so pytest itself never imports TensorFlow)
and local model server processes (which import TensorFlow while the models are built)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.spec import ServingSpec

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Store:
    root: Path
    base: Path
    proc: subprocess.Popen

    def ready(self) -> Path:
        """The model store once every model is built."""
        if self.proc.wait(timeout=300) != 0:
            raise RuntimeError("building the test SavedModels failed")
        return self.base


@pytest.fixture(scope="session")
def model_store(tmp_path_factory) -> Store:
    root = tmp_path_factory.mktemp("tfk-root")
    base = root / "default" / ".claims" / "models"
    base.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.serving.models", str(base)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield Store(root, base, proc)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def started_server(store: Store, name: str) -> LocalServing:
    spec = ServingSpec(model_name="linear", claim="models", name=name, load_timeout_seconds=120)
    target = LocalServing(spec, root=str(store.root), server="stand-in")
    target.ensure(print)
    return target
