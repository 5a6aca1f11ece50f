"""Stopping the local servers that outlive their DAG runs: ``airflow-tfk stop`` and
``TFStopModelServerOperator``, on real stand-in model server processes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import psutil
import pytest

from airflow_tfk.cli import main as cli
from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators.serving import TFStopModelServerOperator
from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.spec import ServingSpec

pytestmark = pytest.mark.e2e


def _server(root, model: str) -> LocalServing:
    target = LocalServing(
        ServingSpec(model_name=model, base_path=str(root / "store")), root=str(root), server="stand-in"
    )
    target.ensure(print)
    return target


def test_cli_lists_and_stops_and_the_operator_stops(tmp_path, capsys) -> None:
    a, b = _server(tmp_path, "alpha"), _server(tmp_path, "beta")
    pid_a, pid_b = a._record()["pid"], b._record()["pid"]
    capsys.readouterr()  # what starting them printed
    try:
        assert cli.main(["stop", "--root", str(tmp_path)]) == 0  # no name: a listing
        listing = capsys.readouterr().out.splitlines()
        assert [c.strip() for c in listing[0].split("|")] == ["kind", "server", "pid", "url"]
        rows = sorted([c.strip() for c in line.split("|")][:3] for line in listing[2:])
        assert rows == [
            ["model-server", "default/tfs-alpha", str(pid_a)],
            ["model-server", "default/tfs-beta", str(pid_b)],
        ]
        # the same listing as data, as Airflow's listings give it
        assert cli.main(["stop", "--root", str(tmp_path), "-o", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert sorted((d["name"], d["pid"]) for d in data) == [("tfs-alpha", pid_a), ("tfs-beta", pid_b)]
        assert all(d["url"].startswith("http://127.0.0.1:") for d in data)

        assert cli.main(["stop", "model-server", "alpha", "--root", str(tmp_path)]) == 0
        assert f"stopped model-server default/tfs-alpha (pid {pid_a})" in capsys.readouterr().out
        assert not psutil.pid_exists(pid_a) and not a.running() and b.running()
        assert cli.main(["stop", "model-server", "alpha", "--root", str(tmp_path)]) == cli.EXIT_SPEC_ERROR
        assert "no local model-server alpha recorded" in capsys.readouterr().err

        op = TFStopModelServerOperator(
            model_name="beta", backend="local", backend_config={"root": str(tmp_path)}
        )
        op.execute(
            {"ti": SimpleNamespace(dag_id="d", task_id="stop", run_id="r", map_index=-1, try_number=1)}
        )
        assert not psutil.pid_exists(pid_b) and not b.running()
        assert cli.main(["stop", "--root", str(tmp_path)]) == 0
        assert "no local model server or TensorBoard is running" in capsys.readouterr().out
        assert cli.main(["stop", "--root", str(tmp_path), "-o", "yaml"]) == 0
        assert capsys.readouterr().out == "[]\n"
    finally:
        a.delete(print)
        b.delete(print)


def test_stop_operator_validates_before_touching_anything() -> None:
    op = TFStopModelServerOperator(model_name="m", backend="local", serving={"replicas": 2})
    with pytest.raises(SpecError) as err:
        op.execute({})
    assert err.value.field == "serving.replicas"
    with pytest.raises(SystemExit):
        cli.main(["stop", "wizard"])
