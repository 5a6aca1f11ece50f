"""TensorBoard: a real local TensorBoard process starts, answers HTTP on its port, is found
again, and is stopped by its teardown; the extra link reads the pushed URL."""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace

import psutil
import pytest

from airflow_tfk.operators.tensorboard import (
    TensorBoardLink,
    TFStartTensorBoardOperator,
    TFStopTensorBoardOperator,
)
from airflow_tfk.serving.spec import TensorBoardSpec
from airflow_tfk.tensorboard.local import LocalTensorBoard
from tests.listeners import listening, not_loopback


class TI(SimpleNamespace):
    def xcom_push(self, key, value):
        self.pushed[key] = value


def context(task_id: str) -> dict:
    return {
        "ti": TI(
            dag_id="digits_daily", task_id=task_id, run_id="manual__1", map_index=-1, try_number=1, pushed={}
        )
    }


@pytest.mark.e2e
def test_local_tensorboard_serves_the_logs_and_stops(tmp_path):
    logdir = tmp_path / "root" / "default" / ".claims" / "logs" / "run-1"
    logdir.mkdir(parents=True)
    start = TFStartTensorBoardOperator(
        task_id="tensorboard",
        claim="logs",
        sub_path="run-1",
        backend="local",
        backend_config={"root": str(tmp_path / "root")},
    )
    stop = TFStopTensorBoardOperator(
        claim="logs", sub_path="run-1", backend="local", backend_config={"root": str(tmp_path / "root")}
    )
    ctx = context("tensorboard")
    value = start.execute(ctx)
    server = start.server(ctx)
    pid = server._record()["pid"]
    try:
        assert ctx["ti"].pushed["tensorboard"] == value
        assert value["url"].startswith("http://127.0.0.1:") and value["backend"] == "local"
        with urllib.request.urlopen(value["url"], timeout=30) as resp:
            assert resp.status == 200 and b"TensorBoard" in resp.read()
        # the local equivalent of its NetworkPolicy: reachable from this machine only
        assert listening(pid) and not not_loopback(pid), listening(pid)
        assert server._record()["logdir"] == str(logdir)
        # a second start (retry) finds the running one instead of starting another
        assert start.execute(context("tensorboard"))["url"] == value["url"]
        assert server._record()["pid"] == pid
    finally:
        stop.execute(context("stop_tensorboard"))
    assert not server.running()
    assert not psutil.pid_exists(pid)


def test_link_reads_the_url_from_the_tensorboard_task(monkeypatch):
    from airflow.sdk.execution_time.xcom import XCom

    seen = {}

    def get_one(**kw):
        seen.update(kw)
        return {"url": "http://tb.example/"}

    monkeypatch.setattr(XCom, "get_one", get_one)
    monkeypatch.setattr(XCom, "get_value", lambda **kw: {"url": "http://own/"})
    key = SimpleNamespace(dag_id="d", task_id="train", run_id="r", map_index=-1, try_number=1)
    training = SimpleNamespace(tensorboard_task_id="tb_task")
    assert TensorBoardLink().get_link(training, ti_key=key) == "http://tb.example/"
    assert seen == {"key": "tensorboard", "dag_id": "d", "run_id": "r", "task_id": "tb_task"}
    assert TensorBoardLink().get_link(SimpleNamespace(), ti_key=key) == "http://tb.example/"
    assert seen["task_id"] == "tensorboard"
    own = TFStartTensorBoardOperator(task_id="tensorboard", claim="logs")
    assert TensorBoardLink().get_link(own, ti_key=key) == "http://own/"
    monkeypatch.setattr(XCom, "get_one", lambda **kw: None)
    assert TensorBoardLink().get_link(training, ti_key=key) == ""


def test_spec_errors_and_defaults():
    from airflow_tfk.core.errors import SpecError

    op = TFStartTensorBoardOperator(claim="logs", backend="local")
    assert op.task_id == "tensorboard"
    assert op.spec("digits_daily").name == "tb-digits-daily-" + op.spec("digits_daily").name[-6:]
    with pytest.raises(SpecError):
        TFStartTensorBoardOperator(claim=None, backend="local").spec("d")
    with pytest.raises(ValueError, match="action"):
        TFStartTensorBoardOperator(claim="logs", action="restart")
    assert LocalTensorBoard(TensorBoardSpec(name="tb", base_path="/x")).logdir() == "/x"


@pytest.mark.e2e
def test_a_tensorboard_whose_port_is_taken_before_it_binds_starts_on_another(tmp_path, monkeypatch):
    """Its port was free when chosen and taken by another process before TensorBoard bound
    it (two starts at once, or any other program): the answer on that port is not taken for
    TensorBoard's. It starts again on a free port, and the URL it gives is its own."""
    import socket

    import airflow_tfk.tensorboard.local as tb_local

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    taken = holder.getsockname()[1]
    monkeypatch.setattr(tb_local, "_free", lambda port: True)  # the check ran before the other bound it
    server = LocalTensorBoard(
        TensorBoardSpec(name="tb", base_path=str(tmp_path / "logs"), port=taken), root=str(tmp_path)
    )
    said = []
    with holder:
        url = server.start(said.append)
        try:
            pid = server._record()["pid"]
            port = int(url.rsplit(":", 1)[1].strip("/"))
            assert port != taken and ("127.0.0.1", port) in listening(pid), (url, listening(pid))
            assert ("127.0.0.1", taken) not in listening(pid) and not not_loopback(pid)
            assert any(f"port {taken} was taken by another process" in line for line in said), said
            with urllib.request.urlopen(url, timeout=30) as resp:
                assert b"TensorBoard" in resp.read()
        finally:
            server.stop(said.append)
    assert not server.running()
