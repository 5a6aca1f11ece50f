"""BackendKind and the per-feature registries (backends, serving targets, TensorBoards):
every kind has a class in every registry, each imported only when asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_tfk.core.constants import BACKEND_KINDS, BackendKind, backend_kind
from airflow_tfk.core.registry import Registry


def test_the_kind_is_its_text() -> None:
    assert BackendKind.KUBERNETES == "kubernetes" and str(BackendKind.LOCAL) == "local"
    assert BACKEND_KINDS == ("kubernetes", "local")
    assert backend_kind("local") is BackendKind.LOCAL
    with pytest.raises(ValueError, match="TFK_BACKEND: must be 'kubernetes' or 'local'"):
        backend_kind("docker", "TFK_BACKEND")


def test_every_registry_has_a_class_for_every_kind() -> None:
    from airflow_tfk.backends import BACKENDS
    from airflow_tfk.serving.targets import TARGETS
    from airflow_tfk.tensorboard import TENSORBOARDS

    for registry in (BACKENDS, TARGETS, TENSORBOARDS):
        for kind in BackendKind:
            assert isinstance(registry.load(kind), type), (registry.feature, kind)
            assert registry.load(kind.value) is registry.load(kind)
        with pytest.raises(ValueError, match="backend: must be"):
            registry.load("docker")
    with pytest.raises(ValueError, match="no entry for local"):
        Registry("x", {BackendKind.KUBERNETES: "os:getcwd"})


def test_the_local_entries_do_not_load_the_kubernetes_client() -> None:
    code = (
        "import sys\n"
        "from airflow_tfk.backends import BACKENDS\n"
        "from airflow_tfk.serving.targets import TARGETS\n"
        "from airflow_tfk.tensorboard import TENSORBOARDS\n"
        "for r in (BACKENDS, TARGETS, TENSORBOARDS): r.load('local')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'kubernetes_asyncio')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
