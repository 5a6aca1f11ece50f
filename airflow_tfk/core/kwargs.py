"""The keyword arguments that rebuild an object in another process (a backend or a server
handed from the Airflow worker to the triggerer, or to a retry)."""

from __future__ import annotations

import inspect
from typing import Any

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def init_kwargs(obj: object, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Each named parameter of ``type(obj).__init__`` but ``skip``, read from the attribute
    of the same name. Taken from the signature, so a new parameter cannot be left out of
    an object's ``config()``; the attribute must hold the value as it was normalised."""
    params = inspect.signature(type(obj).__init__).parameters.values()
    return {
        p.name: getattr(obj, p.name) for p in params if p.kind in _NAMED and p.name not in ("self", *skip)
    }
