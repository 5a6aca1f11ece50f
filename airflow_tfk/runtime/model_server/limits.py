"""What one request, and all requests at once, may make the stand-in allocate.

Two bounds, the same for REST and gRPC:

* ``max_request_bytes``: the inputs a request *declares* (shape x dtype size), checked
  before any array is made. A 51-byte gRPC request may declare a 2,000,000 x 64 tensor
  with a single value that TensorFlow would repeat: 512 MB from 51 bytes. The declared
  size is what counts, never the wire size.
* ``inflight_bytes`` (default: ``max_request_bytes``, one request of the largest size):
  requests are decoded and run only while the sum of their sizes
  (the larger of the wire size and the declared inputs) fits this budget; the others wait
  up to ``wait_seconds`` for room, then get RESOURCE_EXHAUSTED (503). So the server's
  memory grows with the budget, not with the number of clients. REST bodies up to 1 MiB
  skip it (see ``rest.SMALL_BODY``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from airflow_tfk.runtime.model_server.manager import RequestError

#: numpy refuses more dimensions than this (NPY_MAXDIMS of numpy 1.x)
MAX_DIMS = 32


class Limits:
    def __init__(
        self, max_request_bytes: int = 64 << 20, inflight_bytes: int | None = None, wait_seconds: float = 10.0
    ) -> None:
        self.max_request_bytes = max_request_bytes
        self.inflight_bytes = max(inflight_bytes or max_request_bytes, max_request_bytes)
        self.wait_seconds = wait_seconds
        self._used = 0
        self._room = threading.Condition()

    @contextmanager
    def hold(self, size: int, what: str) -> Iterator[None]:
        """Reserve ``size`` bytes of the budget while the block runs."""
        if size > self.max_request_bytes:
            raise RequestError(
                413,
                f"{what} ({size} bytes) exceeds the limit of {self.max_request_bytes} bytes",
                "RESOURCE_EXHAUSTED",
            )
        with self._room:
            if not self._room.wait_for(lambda: self._used + size <= self.inflight_bytes, self.wait_seconds):
                raise RequestError(
                    503,
                    f"the server is decoding {self._used} bytes of other requests (budget "
                    f"{self.inflight_bytes}); retry later",
                    "RESOURCE_EXHAUSTED",
                )
            self._used += size
        try:
            yield
        finally:
            with self._room:
                self._used -= size
                self._room.notify_all()


def declared_bytes(name: str, dims: Iterable[int], itemsize: int, limit: int) -> int:
    """Bytes an input of shape ``dims`` takes; RequestError when the shape is not one or
    is larger than ``limit`` (checked dimension by dimension, so no huge product is made)."""
    shape = list(dims)
    if len(shape) > MAX_DIMS:
        raise RequestError(400, f"input '{name}' has {len(shape)} dimensions; at most {MAX_DIMS}")
    if any(d < 0 for d in shape):
        raise RequestError(400, f"input '{name}' has a negative dimension in its shape {shape}")
    size = max(1, itemsize)
    for d in shape:
        size *= d
        if size > limit:
            break
    if size > limit:
        raise RequestError(
            413,
            f"input '{name}' declares shape {shape[:8]}{'...' if len(shape) > 8 else ''}, "
            f"{_human(shape, itemsize)}; a request may declare at most {limit} bytes of inputs",
            "RESOURCE_EXHAUSTED",
        )
    return size


def _human(shape: list[int], itemsize: int) -> str:
    n = math.prod(shape[:MAX_DIMS])
    return f"{n} elements of {itemsize} bytes" if n < 10**30 else "more elements than fit any memory"


def list_shape(value: object) -> list[int]:
    """The shape of nested lists, read along the first element of each level (numpy
    refuses ragged ones when it makes the array)."""
    shape: list[int] = []
    while isinstance(value, list):
        shape.append(len(value))
        if len(shape) > MAX_DIMS:
            break
        if not value:
            break
        value = value[0]
    return shape
