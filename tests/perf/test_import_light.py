"""Parse time is a feature: importing the provider or parsing a DAG that uses it loads no
Kubernetes client, no TensorFlow, and renders no template. Checked through ``sys.modules``
in interpreters that have loaded nothing of this package (forked from one that has
imported Airflow alone), and the runtime in a fresh interpreter of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = [
    "kubernetes",
    "kubernetes_asyncio",
    "tensorflow",
    "keras",
    "airflow_tfk.render.manifests",
    "airflow.providers.cncf.kubernetes.hooks",
    "airflow.providers.cncf.kubernetes.operators",
]
# What only a running task needs (its wait, its end, its approval, the pod patch it
# applies): a DAG file's parse that loads one of them pays for nothing it uses.
EXECUTE_ONLY = [
    "airflow_tfk._airflow.asset_events",
    "airflow_tfk.backends",
    "airflow_tfk.run.ending",
    "airflow_tfk.run.handle",
    "airflow_tfk.run.lifecycle",
    "airflow_tfk._airflow.lineage",
    "airflow_tfk.operators._approval",
    "airflow_tfk.spec.pod_patch",
    "airflow_tfk.run.policies",
    "airflow_tfk.serving.scaling",
    "airflow_tfk.run.stall",
    "airflow_tfk.core.status",
    "airflow_tfk.run.results",
    "airflow_tfk.triggers.cluster",
    "airflow_tfk.run.wait",
    "airflow_tfk.run.usage",  # at parse only for an operator given a price table
]
# The spec's declarations are needed at parse time only by a DAG file that validates a
# spec there: one that loads training files, or builds its form from the declarations.
SPEC = "airflow_tfk.spec.cluster"
SPEC_AT_PARSE = {"tfk_trainings.py", "tfk_ui_training.py"}
WATCHED = HEAVY + EXECUTE_ONLY + [SPEC]

# Each probe runs in a child forked from an interpreter that has imported Airflow and
# nothing of this package: as fresh as a new interpreter for the provider, without paying
# Airflow's ~2.5 s import once per probe (21 modules and 7 DAG files: about 70 s before).
# That Airflow alone loads nothing heavy is checked first (test_airflow_alone_is_light),
# so whatever a child finds was loaded by the module or DAG file under test.
FORK_SERVER = r"""
import json, os, sys, traceback
heavy = json.loads(sys.argv[1])
import airflow
out = sys.stdout
out.write(json.dumps(sorted(m for m in heavy if m in sys.modules)) + "\n")
out.flush()
for line in sys.stdin:
    body = json.loads(line)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        os.dup2(2, 1)  # whatever the probed code prints cannot garble the replies
        try:
            exec(compile(body, "<probe>", "exec"), {"__name__": "__probe__"})
            reply = {"heavy": sorted(m for m in heavy if m in sys.modules)}
        except BaseException:
            reply = {"error": traceback.format_exc()}
        os.write(write_end, json.dumps(reply).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    out.write((data.decode() or json.dumps({"error": "the probe died"})) + "\n")
    out.flush()
os._exit(0)  # Airflow's exit handlers have nothing to close here
"""


class ForkServer:
    """One interpreter with Airflow imported; ``loaded`` forks it once per probe."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FORK_SERVER, json.dumps(WATCHED)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.airflow_alone = self._reply()

    def _reply(self) -> object:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the probe server exited ({self.proc.poll()}); see its stderr above"
        return json.loads(line)

    def loaded_heavy(self, body: str) -> list[str]:
        return [m for m in self.loaded(body) if m in HEAVY]

    def loaded(self, body: str) -> list[str]:
        """The modules of :data:`WATCHED` that running ``body`` loaded."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(body) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        assert isinstance(reply, dict) and "error" not in reply, reply
        return reply["heavy"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[ForkServer]:
    started = ForkServer()
    yield started
    started.close()


def test_airflow_alone_is_light(server: ForkServer) -> None:
    assert server.airflow_alone == []


@pytest.mark.parametrize(
    "module",
    [
        "airflow_tfk",
        "airflow_tfk.spec.cluster",
        "airflow_tfk.operators.training",
        "airflow_tfk.operators.cluster",
        "airflow_tfk.sensors.cluster",
        "airflow_tfk.triggers.cluster",
        "airflow_tfk.backends.kubernetes.backend",
        "airflow_tfk.backends.local.backend",
        "airflow_tfk.provider_info",
        "airflow_tfk.operators.serving",
        "airflow_tfk.operators.tensorboard",
        "airflow_tfk.serving",
        "airflow_tfk.serving.spec",
        "airflow_tfk.serving.kubernetes",
        "airflow_tfk.serving.local",
        "airflow_tfk.tensorboard",
        "airflow_tfk.tensorboard.kubernetes",
        "airflow_tfk.tensorboard.local",
        "airflow_tfk.kube.connection",
        "airflow_tfk.protocol.progress",
        "airflow_tfk.protocol.model_config",
    ],
)
def test_provider_modules_import_nothing_heavy(server: ForkServer, module: str) -> None:
    assert server.loaded_heavy(f"import {module}") == []


def test_runtime_never_imports_airflow() -> None:
    body = (
        "import airflow_tfk.runtime.progress, airflow_tfk.runtime.cluster, "
        "airflow_tfk.runtime.flags, airflow_tfk.runtime.launch, airflow_tfk.runtime.app, "
        "airflow_tfk.runtime.predict, airflow_tfk.runtime.model_server"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            body + "\nimport sys\n"
            "print(sorted(m for m in sys.modules if m == 'airflow' or "
            "m.startswith('airflow.')))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


def dag_files() -> list[Path]:
    return sorted(p for p in (ROOT / "dags").glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("dag_file", dag_files(), ids=lambda p: p.name)
def test_dag_files_parse_light(server: ForkServer, dag_file: Path) -> None:
    body = (
        f"import runpy, sys\nsys.path.insert(0, {str(ROOT / 'dags')!r})\n"
        f"runpy.run_path({str(dag_file)!r}, run_name='dag_under_test')"
    )
    loaded = server.loaded(body)
    assert [m for m in loaded if m in HEAVY] == []
    assert [m for m in loaded if m in EXECUTE_ONLY] == []
    if dag_file.name not in SPEC_AT_PARSE:
        assert SPEC not in loaded
