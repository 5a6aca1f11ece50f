"""A plain Python DAG's templated operator arguments, through ``airflow dags test``.

``--lr={{ params.lr }}`` with the Param's null default fails the task when Airflow renders
its fields, naming the field and the task, and no cluster is created; with ``lr`` 0.1 the
training's process receives ``--lr=0.1`` (airflow_tfk/_airflow/templated_fields.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import dags_test, migrated_airflow_home

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DAG_FILE = """
import sys
import pendulum
from airflow.sdk import DAG, Param
from airflow_tfk.operators.training import TFTrainingOperator

with DAG(
    "plain_lr",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={{"lr": Param(None, type=["null", "number"])}},
):
    TFTrainingOperator(
        task_id="train",
        backend="local",
        backend_config={{"root": {root!r}}},
        cluster_spec={{
            "image": "local/unused:1",
            "mode": "all_reduce",
            "command": [sys.executable, "-c", {script!r}],
            "args": ["--lr={{{{ params.lr }}}}"],
            "worker": {{"replicas": 1}},
            "ps_grace_seconds": 0,
        }},
    )
"""


def test_a_null_param_inside_args_fails_the_render_and_a_number_reaches_the_process(tmp_path: Path) -> None:
    dags, root, argv = tmp_path / "dags", tmp_path / "tfk-local", tmp_path / "argv.txt"
    dags.mkdir()
    script = f"import sys, pathlib; pathlib.Path({str(argv)!r}).write_text(repr(sys.argv[1:]))"
    (dags / "plain_lr.py").write_text(DAG_FILE.format(root=str(root), script=script))
    env = migrated_airflow_home(
        tmp_path / "home", AIRFLOW__CORE__DAGS_FOLDER=str(dags), TFK_LOCAL_ROOT=str(root)
    )

    refused = dags_test(env, "plain_lr", timeout=600)
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0, out[-4000:]
    assert (
        "TemplateFieldError: cluster_spec.args[0]: in task 'train', the template "
        "'--lr={{ params.lr }}': a null value (None) printed inside a text" in out
    ), out[-4000:]
    assert not argv.exists()
    assert not any(root.rglob("state.json")), "nothing is created for a refused render"

    ran = dags_test(env, "plain_lr", conf={"lr": 0.1}, timeout=600)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    assert ast.literal_eval(argv.read_text())[0] == "--lr=0.1"
