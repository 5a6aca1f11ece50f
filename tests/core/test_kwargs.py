"""``init_kwargs``: a ``config()`` read from ``__init__``'s signature, so it names every parameter."""

from __future__ import annotations

from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.core.kwargs import init_kwargs
from airflow_tfk.kube.connection import KubeConnection


class Thing:
    def __init__(
        self, spec: object, root: str = "/r", *args: object, poll: float = 1.0, **rest: object
    ) -> None:
        self.spec, self.root, self.poll = spec, root, float(poll)


def test_every_named_parameter_but_the_skipped_ones_is_read_back() -> None:
    assert init_kwargs(Thing("s", "/x", poll=2), skip=("spec",)) == {"root": "/x", "poll": 2.0}


def test_configs_rebuild_an_equal_object(tmp_path) -> None:
    backend = LocalBackend(str(tmp_path), fixed_ports=True, env_allowlist=("PATH",), keep_history=1)
    again = LocalBackend(**backend.config())
    assert again.config() == backend.config()
    assert backend.config()["env_allowlist"] == ["PATH"] and backend.config()["keep_history"] == 1
    conn = KubeConnection("c", "ctx", "/k", True)
    assert KubeConnection(**conn.config()) == conn
    assert KubeConnection.from_config({**conn.config(), "unschedulable_timeout": 5}) == conn
