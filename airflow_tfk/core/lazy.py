"""Lazy public names for a package's ``__init__`` (PEP 562): a name is imported from its
module when first used, so importing the package (and parsing a DAG that uses it) pulls in
neither the Kubernetes client nor TensorFlow nor the template engine."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, modules: dict[str, tuple[str, ...]]) -> tuple[list[str], Callable[[str], Any]]:
    """``__all__`` and ``__getattr__`` of ``package``, from each module's public names."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return sorted(where), __getattr__
