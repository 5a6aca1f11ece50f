"""The wheel on its own: what a user installs from an index, with no checkout anywhere.

The sdist and the wheel are built with ``uv build`` (the wheel from the sdist), their
metadata validated, and the wheel installed with its ``local`` extra into a fresh virtual
environment (pinned to requirements/lock.txt when the checkout has one). Then, from a
working directory outside the checkout and with no ``PYTHONPATH``: Airflow lists the
provider, every module imports from the install, the templates render from the installed
package, a DAG written here parses, ``airflow-tfk --version`` answers, and a few steps of a
real distributed training run through ``airflow dags test`` on the local backend.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.packaged import wheel_env as w

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

VERSION = w.pyproject()["project"]["version"]
DAG_ID = "wheel_smoke"
CLAIM = "wheel-models"
# A DAG as a user writes it against the installed provider: two workers train the digits
# example (shipped in the package's runtime) with MultiWorkerMirroredStrategy.
DAG = f'''
import pendulum
from airflow.sdk import DAG

from airflow_tfk.operators.training import TFTrainingOperator

with DAG(
    dag_id="{DAG_ID}",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={{"steps": 10}},
    render_template_as_native_obj=True,
):
    TFTrainingOperator(
        task_id="train",
        backend="local",
        cluster_spec={{
            "image": "registry.invalid/unused:1",
            "mode": "all_reduce",
            "command": ["python", "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": ["--tfk_steps", "{{{{ params.steps | string }}}}", "--tfk_model_name", "digits"],
            "worker": {{"replicas": 2}},
            "storage": {{"models": {{"claim": "{CLAIM}"}}}},
            "max_duration_seconds": 900,
        }},
        progress_interval=5,
    )
'''


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> w.Dist:
    return w.build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def installed(dist: w.Dist) -> Iterator[w.WheelVenv]:
    # Not under pytest's tmp_path: that lives under /tmp too, but a temporary directory
    # of our own is removed right after the module, venv (~1.5 GB with TensorFlow) first.
    base = Path(tempfile.mkdtemp(prefix="tfk-wheel-"))
    start = time.monotonic()
    venv = w.WheelVenv.create(base, dist.wheel, constraints=w.LOCK if w.LOCK.exists() else None)
    venv.seconds["install"] = time.monotonic() - start
    try:
        yield venv
    finally:
        venv.remove()


def test_the_wheel_and_the_sdist_are_complete_and_their_metadata_valid(dist: w.Dist) -> None:
    assert w.wheel_problems(dist.wheel) == []
    assert w.sdist_problems(dist.sdist) == []


def test_airflow_lists_the_installed_provider(installed: w.WheelVenv) -> None:
    assert w.check_provider(installed, VERSION) == f"listed as airflow-tfk {VERSION}"


def test_every_module_imports_from_the_install(installed: w.WheelVenv) -> None:
    w.check_import(installed)


def test_the_templates_render_from_the_installed_package(installed: w.WheelVenv) -> None:
    assert w.check_render(installed, w.expected_render(w.EXAMPLE_SPEC)).endswith("from _templates/")


def test_version(installed: w.WheelVenv) -> None:
    assert w.check_version(installed, VERSION) == f"airflow-tfk {VERSION}"


def test_a_dag_parses_and_a_small_training_runs(installed: w.WheelVenv) -> None:
    (installed.dags / f"{DAG_ID}.py").write_text(DAG)
    w.check_dags(installed, [DAG_ID])
    w.check_training(installed, DAG_ID, {"steps": 10})
    models = installed.local_root / "default" / ".claims" / CLAIM / "digits"
    versions = [p for p in models.iterdir() if re.fullmatch(r"\d+", p.name)]
    assert versions and (versions[0] / "saved_model.pb").is_file(), list(models.iterdir())
