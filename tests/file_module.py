"""Load a script or a file outside the packages (``scripts/``, ``bench/``, ``deploy/``) as a
module, for its tests, under a name of its own.

The module is registered in ``sys.modules`` before it runs (its dataclasses look their
module up there) and loaded once per session. The name must not be an importable one: on
``sys.path`` as ``render``, ``deploy/rbac/render.py`` would shadow the test package
``tests/render`` for every later test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load(name: str, path: Path) -> ModuleType:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]
