"""The connection layer of the stand-in's REST API: one thread reads every request head,
a fixed pool of threads runs complete requests.

Why not a thread per connection: a client that sends one header byte every 2 s never
trips a per-read timeout, and 300 of them held every worker while ordinary predicts
waited. Here a connection costs a worker only once its whole request head (request line
and headers) has arrived, so a slow client costs a socket and at most ``max_head_bytes``
of buffer, and these bounds drop it:

* ``header_timeout``: the whole head must arrive within this many seconds of the
  connection being ready for it (also the idle time allowed between keep-alive requests);
  a partial head is answered 408 and the connection closed;
* ``max_pending_per_client``: at most this many connections of one client address may be
  waiting for a head for longer than ``EVICT_AFTER``; one more closes that client's
  oldest waiting connection, so a client that opens hundreds of slow connections only
  ever pushes out its own, and an ordinary request (whose head arrives at once) is never
  the oldest. A burst of fresh connections is not cut: it is bounded by
  ``max_connections``;
* ``max_connections``: open connections in all; at the cap a new connection closes the
  oldest one still waiting for its head (if it has waited ``EVICT_AFTER``), else the
  accept loop stops and new connections wait in the kernel's listen backlog;
* ``max_head_bytes``: a head larger than this is answered 431.

A body can trickle as slowly as a head, so bodies go the same way: one of up to
``max_prefetch`` bytes (a predict of ordinary size) is read by the reactor with its head,
under the same deadline, and costs no worker until it is whole. A larger body is read by
the worker (with a deadline for the whole body, see ``Reader``), but at most half of the
workers read such bodies at once; one more is answered 503 at once, so trickling large
uploads can never take the workers that answer ordinary requests.
"""

from __future__ import annotations

import contextlib
import queue
import re
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

# A body arrives at least this fast once its head is in (bytes per second), on top of the
# read timeout: a 64 MiB upload may take a minute, a 100-byte one may not take ten.
MIN_BODY_RATE = 1 << 20
# A connection this young is not evicted for its client's sake: its head may be in
# flight, or in its socket buffer waiting for the reactor to read it.
EVICT_AFTER = 1.0
_LENGTH = re.compile(rb"^content-length:[ \t]*([0-9]{1,18})[ \t]*\r?$", re.IGNORECASE | re.MULTILINE)


def _head_end(buf: bytearray) -> int:
    """Where the request head ends in ``buf`` (after its empty line), -1 before; clients may
    send bare LFs (http.server accepts them)."""
    ends = [i + n for i, n in ((buf.find(b"\r\n\r\n"), 4), (buf.find(b"\n\n"), 2)) if i >= 0]
    return min(ends) if ends else -1


def _declared(head: bytes) -> int | None:
    """The body length a head declares; None when it declares none, or not one the reactor
    can trust (several, chunked): the handler answers those."""
    if re.search(rb"^transfer-encoding:", head, re.IGNORECASE | re.MULTILINE):
        return None
    found = _LENGTH.findall(head)
    return int(found[0]) if len(found) == 1 else None


@dataclass(eq=False)
class Connection:
    sock: socket.socket
    client: str
    buf: bytearray = field(default_factory=bytearray)
    since: float = 0.0  # when it became ready for a head (monotonic)
    body_pending: bool = False  # dispatched with a declared body not yet buffered whole
    body_due: float = 0.0  # when a body awaited in the reactor must be whole (monotonic)


class Reader:
    """``readline``/``read`` over a connection's already-buffered bytes, then its socket,
    every socket read bounded by one overall deadline."""

    def __init__(self, conn: Connection, timeout: float) -> None:
        self.conn = conn
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def body_deadline(self, length: int) -> None:
        self.deadline = time.monotonic() + self.timeout + length / MIN_BODY_RATE

    def _fill(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("read deadline passed")
        self.conn.sock.settimeout(left)
        chunk = self.conn.sock.recv(1 << 16)
        self.conn.buf += chunk
        return bool(chunk)

    def readline(self, limit: int = -1) -> bytes:
        buf = self.conn.buf
        while True:
            end = buf.find(b"\n")
            if end >= 0 and (limit < 0 or end < limit):
                n = end + 1
                break
            if 0 <= limit <= len(buf):
                n = limit
                break
            if not self._fill():
                n = len(buf)
                break
        line = bytes(buf[:n])
        del buf[:n]
        return line

    def skip(self, size: int) -> bool:
        """Read and drop ``size`` bytes, a buffer at a time; whether they all came."""
        while size > 0:
            if not self.conn.buf and not self._fill():
                return False
            n = min(size, len(self.conn.buf))
            del self.conn.buf[:n]
            size -= n
        return True

    def read(self, size: int = -1) -> bytes:
        buf = self.conn.buf
        while (size < 0 or len(buf) < size) and self._fill():
            pass
        n = len(buf) if size < 0 else min(size, len(buf))
        data = bytes(buf[:n])
        del buf[:n]
        return data


class Writer:
    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = timeout

    def write(self, data: bytes) -> int:
        self.sock.settimeout(self.timeout)
        self.sock.sendall(data)
        return len(data)

    def flush(self) -> None:
        pass


# (connection, reader, writer) -> whether the connection may carry another request
Serve = Callable[[Connection, Reader, Writer], bool]


class ReactorHTTPServer:
    """Accepts connections and reads request heads on one thread; runs ``serve`` for each
    complete head on a pool of ``workers`` threads."""

    def __init__(
        self,
        address: tuple[str, int],
        serve: Serve,
        *,
        workers: int,
        read_timeout: float,
        header_timeout: float = 10.0,
        max_connections: int = 1024,
        max_pending_per_client: int = 64,
        max_head_bytes: int = 64 << 10,
        max_prefetch: int = 64 << 10,
    ) -> None:
        self._serve = serve
        self.read_timeout = read_timeout
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self.max_pending_per_client = max_pending_per_client
        self.max_head_bytes = max_head_bytes
        self.max_prefetch = max_prefetch
        self._large_bodies = threading.BoundedSemaphore(max(1, workers // 2))
        self.listener = socket.create_server(address, backlog=1024, reuse_port=False)
        self.listener.setblocking(False)
        self.server_address = self.listener.getsockname()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="rest")
        self._selector = selectors.DefaultSelector()
        self._pending: OrderedDict[Connection, None] = OrderedDict()  # in head order
        # the pending ones whose head is whole and whose small body is awaited, in due order
        self._bodies: OrderedDict[Connection, None] = OrderedDict()
        self._per_client: dict[str, int] = {}
        self._open = 0
        self._lock = threading.Lock()  # _open is changed by workers too
        self._returned: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self.dropped = {"header_timeout": 0, "evicted": 0, "head_too_large": 0, "large_bodies_busy": 0}

    # -- the reactor thread -----------------------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:
        sel = self._selector
        sel.register(self.listener, selectors.EVENT_READ, "listen")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        listening = True
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(self._next_wait(poll_interval)):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        try:
                            self._readable(key.data)
                        except Exception:  # one connection's failure is not the server's
                            self._close(key.data)
                while not self._returned.empty():
                    self._await_head(self._returned.get())
                self._expire()
                full = self._open >= self.max_connections and not self._evictable()
                if full and listening:
                    sel.unregister(self.listener)
                elif not full and not listening:
                    sel.register(self.listener, selectors.EVENT_READ, "listen")
                listening = not full
        finally:
            for conn in list(self._pending):
                self._close(conn)
            self._stopped.set()

    def _next_wait(self, poll_interval: float) -> float:
        if not self._pending:
            return poll_interval
        oldest = next(iter(self._pending))
        due = oldest.since + self.header_timeout
        if self._bodies:
            due = min(due, next(iter(self._bodies)).body_due)
        return max(0.0, min(poll_interval, due - time.monotonic()))

    def _evictable(self) -> Connection | None:
        oldest = next(iter(self._pending), None)
        return oldest if oldest is not None and oldest.since <= time.monotonic() - EVICT_AFTER else None

    def _accept(self) -> None:
        for _ in range(64):  # a bounded batch: heads of open connections are read meanwhile
            if self._open >= self.max_connections:
                victim = self._evictable()
                if victim is None:
                    return
                self.dropped["evicted"] += 1
                self._close(victim)
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open += 1
            client = str(addr[0]) if isinstance(addr, tuple) else str(addr)
            if self._per_client.get(client, 0) >= self.max_pending_per_client:
                self._evict_oldest(client)
            conn = Connection(sock, client)
            sock.setblocking(False)
            with contextlib.suppress(OSError):  # the head is often here already
                conn.buf += sock.recv(1 << 16)
            self._await_head(conn)

    def _evict_oldest(self, client: str) -> None:
        old = time.monotonic() - EVICT_AFTER
        for conn in self._pending:
            if conn.since > old:
                return  # in head order: the rest are younger still
            if conn.client == client:
                self.dropped["evicted"] += 1
                self._close(conn)
                return

    def _await_head(self, conn: Connection) -> None:
        conn.since = time.monotonic()
        if self._ready(conn):
            self._dispatch(conn)
            return
        if _head_end(conn.buf) < 0 and len(conn.buf) > self.max_head_bytes:
            self.dropped["head_too_large"] += 1
            self._answer_and_close(conn, 431, "Request Header Fields Too Large")
            return
        conn.sock.setblocking(False)
        self._pending[conn] = None
        self._per_client[conn.client] = self._per_client.get(conn.client, 0) + 1
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        except (ValueError, OSError):
            self._close(conn)

    def _unpend(self, conn: Connection) -> None:
        self._bodies.pop(conn, None)
        if self._pending.pop(conn, 0) is None:
            left = self._per_client[conn.client] - 1
            if left:
                self._per_client[conn.client] = left
            else:
                del self._per_client[conn.client]
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(conn.sock)

    def _ready(self, conn: Connection) -> bool:
        """Whether a worker may take the connection: its head is whole, and so is its body
        when that is small enough to wait for here."""
        end = _head_end(conn.buf)
        if end < 0:
            return False
        length = _declared(bytes(conn.buf[:end]))
        if length is None:
            conn.body_pending = False
            return True
        if len(conn.buf) - end >= length:
            conn.body_pending = False
            return True
        conn.body_pending = True
        if length > self.max_prefetch:
            return True
        if conn not in self._bodies:  # the body is read by the same deadline as the worker's
            conn.body_due = time.monotonic() + self.read_timeout + length / MIN_BODY_RATE
            self._bodies[conn] = None
        return False

    def _readable(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(conn)
            return
        conn.buf += chunk
        if self._ready(conn):
            self._unpend(conn)
            self._dispatch(conn)
        elif _head_end(conn.buf) < 0 and len(conn.buf) > self.max_head_bytes:
            self.dropped["head_too_large"] += 1
            self._answer_and_close(conn, 431, "Request Header Fields Too Large")

    def _expire(self) -> None:
        now = time.monotonic()
        while self._bodies:
            conn = next(iter(self._bodies))
            if now < conn.body_due:
                break
            self.dropped["header_timeout"] += 1
            self._answer_and_close(conn, 408, "Request Timeout", "the body did not arrive in time")
        while self._pending:
            conn = next(iter(self._pending))
            if now - conn.since < self.header_timeout:
                return
            if conn.buf.strip():
                self.dropped["header_timeout"] += 1
                self._answer_and_close(conn, 408, "Request Timeout")
            else:  # an idle keep-alive connection, or one that never spoke
                self._close(conn)

    def _answer_and_close(
        self,
        conn: Connection,
        status: int,
        reason: str,
        why: str = "the request head did not arrive whole within the limits",
    ) -> None:
        body = f'{{"error": "{reason}: {why}"}}'.encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError):
            conn.sock.send(head + body)  # non-blocking: a client that does not read loses it
        self._close(conn)

    def _close(self, conn: Connection) -> None:
        self._unpend(conn)
        with contextlib.suppress(OSError):
            conn.sock.close()
        with self._lock:
            self._open -= 1

    def _dispatch(self, conn: Connection) -> None:
        try:
            self._pool.submit(self._work, conn)
        except RuntimeError:  # the pool is shutting down
            self._close(conn)

    # -- a worker thread --------------------------------------------------------------------
    def _work(self, conn: Connection) -> None:
        conn.sock.setblocking(True)
        keep = False
        large = conn.body_pending
        if large and not self._large_bodies.acquire(blocking=False):
            self.dropped["large_bodies_busy"] += 1
            self._answer_and_close(conn, 503, "Service Unavailable", "other large bodies are arriving; retry")
            return
        try:
            keep = self._serve(conn, Reader(conn, self.read_timeout), Writer(conn.sock, self.read_timeout))
        except Exception:  # one connection's failure is not the server's
            pass
        finally:
            if large:
                self._large_bodies.release()
        if keep and not self._stop.is_set():
            self._returned.put(conn)
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
            return
        with contextlib.suppress(OSError):
            conn.sock.close()
        with self._lock:
            self._open -= 1

    # -- life cycle ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._stopped.wait(10)

    def server_close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self.listener.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for s in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()

    def stats(self) -> dict[str, Any]:
        return {"open": self._open, "waiting_for_head": len(self._pending), **self.dropped}
