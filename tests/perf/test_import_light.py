"""Parse time is a feature: importing the provider or parsing a DAG that uses it loads no
Kubernetes client, no TensorFlow, and renders no template. Checked in fresh interpreters
through ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = [
    "kubernetes",
    "kubernetes_asyncio",
    "tensorflow",
    "keras",
    "airflow_tfk.render",
    "airflow.providers.cncf.kubernetes.hooks",
    "airflow.providers.cncf.kubernetes.operators",
]

PROBE = """
import json, sys
{body}
heavy = {heavy!r}
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def loaded_heavy(body: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body, heavy=HEAVY)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "module",
    [
        "airflow_tfk",
        "airflow_tfk.spec",
        "airflow_tfk.operators.training",
        "airflow_tfk.operators.cluster",
        "airflow_tfk.sensors.workers",
        "airflow_tfk.triggers.workers",
        "airflow_tfk.backends.kubernetes",
        "airflow_tfk.backends.local",
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
def test_provider_modules_import_nothing_heavy(module: str) -> None:
    assert loaded_heavy(f"import {module}") == []


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
def test_dag_files_parse_light(dag_file: Path) -> None:
    body = (
        f"import runpy, sys\nsys.path.insert(0, {str(ROOT / 'dags')!r})\n"
        f"runpy.run_path({str(dag_file)!r}, run_name='dag_under_test')"
    )
    assert loaded_heavy(body) == []
