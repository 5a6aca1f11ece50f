"""The model server stops during a publish: the publish says what is true (never "still
serving" while no server runs), starts the local server again once, or fails at once
naming the reason, instead of waiting out the load timeout."""

from __future__ import annotations

import os
import signal
import time

import pytest

from airflow_tfk.serving.base import ServingError, VersionState
from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.publish import publish
from airflow_tfk.serving.spec import ServingSpec
from tests.serving.conftest import started_server
from tests.serving.fakes import FakeServing
from tests.serving.test_publish import run

ROWS = {"instances": [[1.0, 2.0]]}


class DyingServing(FakeServing):
    """Dies when the candidate entry is written; ``restartable`` and whether starting it
    again works are set per test."""

    def __init__(self, restartable: bool, starts: bool) -> None:
        spec = ServingSpec(model_name="digits", claim="models", load_timeout_seconds=90)
        super().__init__(spec, {1: "ok", 2: "ok"})
        self.restartable = restartable
        self.starts = starts
        self.down = False
        self.die_on_candidate = False

    def write_config(self, config) -> None:
        super().write_config(config)
        if self.die_on_candidate and config.get("digits-tfk-candidate") is not None:
            self.down, self.die_on_candidate = True, False

    def server_down(self) -> str | None:
        return "the model server (pid 42) is not running" if self.down else None

    def ensure(self, emit) -> None:
        super().ensure(emit)
        if self.down and not self.starts:
            raise RuntimeError("port 8501 is taken")
        self.down = False

    def version_state(self, version: int, *, model: str | None = None) -> VersionState | None:
        return None if self.down else super().version_state(version, model=model)


def test_a_local_server_killed_mid_publish_is_started_again_and_the_publish_goes_on() -> None:
    target = DyingServing(restartable=True, starts=True)
    run(target, 1)
    target.die_on_candidate = True
    lines: list[str] = []
    result = run(target, 2, emit=lines.append)
    assert result.version == 2 and target.config.get("digits").stable == 2
    assert "the model server (pid 42) is not running: starting it again" in lines


@pytest.mark.parametrize(
    ("restartable", "starts", "now"),
    [
        (True, False, "version 1 is NOT serving"),
        (False, True, "version 1 is NOT serving: the model server (pid 42) is not running"),
    ],
)
def test_a_server_that_stays_down_fails_the_publish_at_once_and_says_so(restartable, starts, now) -> None:
    target = DyingServing(restartable=restartable, starts=starts)
    run(target, 1)
    target.die_on_candidate = True
    target.starts = starts
    started = time.monotonic()
    with pytest.raises(ServingError) as failed:
        run(target, 2)
    message = str(failed.value)
    assert "the model server (pid 42) is not running" in message
    assert now in message and "version 1 is still serving" not in message
    assert "did not become AVAILABLE" not in message  # no 90 s wait for a dead server
    assert time.monotonic() - started < 5


# -- the real local server ------------------------------------------------------------------
@pytest.mark.e2e
def test_the_real_local_server_killed_during_a_publish(model_store, monkeypatch) -> None:
    target = started_server(model_store, "tfs-killed")
    model_store.ready()
    try:
        publish(target, version=1, poll=0.2)
        first = target._record()["pid"]

        def kill_at_candidate(line: str) -> None:
            lines.append(line)
            if line.startswith("publishing linear version"):
                os.kill(target._record()["pid"], signal.SIGKILL)

        lines: list[str] = []
        result = publish(target, version=2, emit=kill_at_candidate, poll=0.2)
        assert result.version == 2
        assert any("is not running" in x and "starting it again" in x for x in lines), lines
        assert target._record()["pid"] != first
        assert target.predict(ROWS, label="stable")["predictions"] == [[6.0]]

        # killed again, and this time it cannot be started: fail at once, say no version serves
        ensure = target.ensure

        def cannot_start(emit) -> None:
            if target.server_down():
                raise RuntimeError("no room for another server")
            ensure(emit)

        monkeypatch.setattr(target, "ensure", cannot_start)
        lines = []
        started = time.monotonic()
        with pytest.raises(ServingError) as failed:
            publish(target, version=1, emit=kill_at_candidate, poll=0.2)
        message = str(failed.value)
        assert "is not running" in message and "starting it again failed: no room" in message
        assert "version 2 is NOT serving" in message and "still serving" not in message
        assert time.monotonic() - started < 30  # not the 120 s load timeout
    finally:
        monkeypatch.undo()
        target.delete(print)


def test_kubernetes_is_not_restarted_by_the_publish() -> None:
    from airflow_tfk.serving.kubernetes import KubernetesServing

    assert KubernetesServing.restartable is False and LocalServing.restartable is True
