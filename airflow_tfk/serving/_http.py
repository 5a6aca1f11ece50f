"""Tiny JSON-over-HTTP client (stdlib only) for the local servers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def request_json(method: str, url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """(status, parsed JSON or text); HTTP errors are answers, not exceptions.

    Raises :class:`OSError` when the server cannot be reached.
    """
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # our URLs
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return answer(status, raw)


def answer(status: int, raw: bytes | str) -> tuple[int, Any]:
    """(status, the body as JSON, or as text when it is not JSON; None when empty)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text
