"""The ports of two local clusters started together under one root: each task's port is
chosen free, but bound by the task seconds later (after TensorFlow's import), so until
then the kernel may offer the same port to the next cluster. Made to happen here: the
kernel's next choices are the first cluster's ports. The second cluster must get others."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core import processes as _process
from airflow_tfk.spec.cluster import RoleSpec
from tests.helpers import python_cluster


def _offering(ports: list[int]) -> SimpleNamespace:
    """A ``socket`` module whose kernel choice (a bind to port 0) is ``ports`` first."""
    offered = list(ports)

    class Socket(socket.socket):
        def bind(self, address: tuple[str, int]) -> None:  # type: ignore[override]
            if address[1] == 0 and offered:
                address = (address[0], offered.pop(0))
            super().bind(address)

    names = {k: getattr(socket, k) for k in dir(socket) if not k.startswith("__")}
    return SimpleNamespace(**{**names, "socket": Socket})


def _spec(name: str):
    return python_cluster(name, "pass", workers=2, mode="between_graph", ps=RoleSpec())


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own register of port choices (not the user's)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return _process.ports_registry()


def _allocate(tmp_path: Path, root: str, name: str) -> dict[str, int]:
    return LocalBackend(str(tmp_path / root), workdir=str(tmp_path))._allocate_ports(_spec(name))


def test_a_cluster_started_next_is_not_given_the_ports_of_one_whose_tasks_did_not_bind_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: Path
) -> None:
    first = _allocate(tmp_path, "root", "first")
    monkeypatch.setattr(_process, "socket", _offering(list(first.values())))
    # the same root, or another one (another checkout, another test): one register
    for root, name in (("root", "second"), ("other-root", "third")):
        later = _allocate(tmp_path, root, name)
        assert len(set(later.values())) == 3 and not set(first.values()) & set(later.values()), (first, later)


def test_a_choice_older_than_the_window_no_longer_holds_its_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: Path
) -> None:
    first = _allocate(tmp_path, "root", "first")
    for entry in registry.glob("*.json"):  # the choice, made long ago
        record = json.loads(entry.read_text())
        entry.write_text(json.dumps({**record, "at": time.time() - _process.PORT_RESERVATION_SECONDS - 1}))
    monkeypatch.setattr(_process, "socket", _offering(list(first.values())))
    second = _allocate(tmp_path, "root", "second")
    # by now the first cluster's tasks listen (the kernel would skip those ports) or ended
    assert second == first
    assert len(list(registry.glob("*.json"))) == 1  # the old choice is gone


def test_without_a_writable_register_the_kernel_chooses_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cache").write_text("a file where the cache directory would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ports = _allocate(tmp_path, "root", "first")
    assert len(set(ports.values())) == 3
