"""Who am I in the TensorFlow cluster, and is everybody else there yet?

Pure Python (no TensorFlow, no Airflow): used by the training runtime, by ``launch``,
and importable anywhere.

``TF_CONFIG`` is taken as is when set. Otherwise it is built from the platform's task
environment (see docs/architecture.md)::

    TFK_CLUSTER  {"chief": ["h:p"], "ps": [...], "worker": [...]}
                 or, for large clusters, per role {"pattern": "n-worker-{i}.n-worker.ns.svc:2222",
                 "count": 600}: the same map in a size that does not grow with the task
                 count, expanded here (see ``expand_cluster``)
    TFK_ROLE     chief | ps | worker | evaluator
    TFK_INDEX    task index (fallback: JOB_COMPLETION_INDEX, set by Indexed Jobs)
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.protocol.digits import plain_int

CLUSTER_ROLES = ("chief", "ps", "worker")
ROLES = (*CLUSTER_ROLES, "evaluator")


class ClusterConfigError(ValueError):
    """The task environment does not describe a usable TensorFlow cluster."""


class ClusterWaitStopped(Exception):
    """:func:`wait_for_cluster` was told to stop (the task got its notice) before the
    tasks it waited for were up."""


class ClusterWaitTimeout(TimeoutError):
    """Some cluster addresses did not resolve or accept connections in time."""


@dataclass(frozen=True)
class TaskInfo:
    """This task's view of the cluster.

    :param cluster: role -> list of ``host:port`` (no evaluator), as in ``TF_CONFIG``.
    :param role: ``chief`` | ``ps`` | ``worker`` | ``evaluator``.
    :param index: task index within ``role``.
    :param mode: ``TFK_MODE`` if set (``between_graph`` | ``parameter_server`` |
        ``all_reduce``), else None.
    """

    cluster: dict[str, list[str]]
    role: str
    index: int
    mode: str | None = None

    @property
    def address(self) -> str | None:
        """This task's own ``host:port``; None for the evaluator (it is not in the map)."""
        addrs = self.cluster.get(self.role) or []
        return addrs[self.index] if 0 <= self.index < len(addrs) else None

    @property
    def is_chief(self) -> bool:
        """The task that coordinates, checkpoints and exports: the chief, or worker 0
        when the cluster has no chief."""
        if self.cluster.get("chief"):
            return self.role == "chief"
        return self.role == "worker" and self.index == 0

    def num(self, role: str) -> int:
        return len(self.cluster.get(role) or [])

    def tf_config(self) -> dict:
        return {
            "cluster": {r: list(a) for r, a in self.cluster.items()},
            "task": {"type": self.role, "index": self.index},
        }

    def tf_config_json(self) -> str:
        return json.dumps(self.tf_config(), separators=(",", ":"))

    def tf1_flags(self) -> list[str]:
        """The legacy flags of TF1 between-graph scripts (clusters of ps and workers;
        a chief, if any, gets ``--job_name=chief``). A host flag of a role the cluster
        lacks is left out, as in the pod args that carry them for a small cluster, so a
        script sees the same argv whichever of the two wrote them."""
        hosts = [
            f"{flag}={','.join(self.cluster[role])}"
            for flag, role in (("--ps_hosts", "ps"), ("--worker_hosts", "worker"))
            if role in self.cluster
        ]
        return [*hosts, f"--job_name={self.role}", f"--task_index={self.index}"]


MAX_PATTERN_COUNT = 100_000


def expand_cluster(value: object, where: str = "TFK_CLUSTER") -> object:
    """Expand the roles given as ``{"pattern": "...{i}...", "count": n}`` into address lists
    (``{i}`` = 0..n-1); roles given as lists, and anything malformed, pass through for
    :func:`_parse_cluster` to judge."""
    if not isinstance(value, Mapping):
        return value
    out: dict[str, object] = {}
    for role, addrs in value.items():
        if isinstance(addrs, Mapping):
            pattern, count = addrs.get("pattern"), addrs.get("count")
            if not isinstance(pattern, str) or pattern.count("{i}") != 1:
                raise ClusterConfigError(
                    f"{where}: {role!r} pattern must contain '{{i}}' once, got {pattern!r}"
                )
            if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_PATTERN_COUNT:
                raise ClusterConfigError(
                    f"{where}: {role!r} count must be 1..{MAX_PATTERN_COUNT}, got {count!r}"
                )
            addrs = [pattern.replace("{i}", str(i)) for i in range(count)]
        out[str(role)] = addrs
    return out


def _parse_cluster(value: object, where: str) -> dict[str, list[str]]:
    value = expand_cluster(value, where)
    if not isinstance(value, Mapping) or not value:
        raise ClusterConfigError(
            f"{where}: the cluster must be a non-empty JSON object "
            f'of role -> ["host:port", ...], got {value!r}'
        )
    cluster: dict[str, list[str]] = {}
    for role, addrs in value.items():
        if isinstance(addrs, str) or not isinstance(addrs, (list, tuple)):
            raise ClusterConfigError(f"{where}: the addresses of {role!r} must be a list")
        for addr in addrs:
            if not isinstance(addr, str) or not _split_address(addr):
                raise ClusterConfigError(
                    f"{where}: {role!r} has an invalid address {addr!r} (expected host:port)"
                )
        cluster[str(role)] = list(addrs)
    return cluster


def _split_address(addr: str) -> tuple[str, int] | None:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not 0 < (plain_int(port) or 0) < 65536:
        return None
    if host.startswith("[") and host.endswith("]"):  # [::1]:2222
        host = host[1:-1]
    return host, int(port)


def split_address(addr: str) -> tuple[str, int]:
    parsed = _split_address(addr)
    if parsed is None:
        raise ClusterConfigError(f"invalid address {addr!r} (expected host:port)")
    return parsed


def task_info(env: Mapping[str, str] | None = None) -> TaskInfo:
    """This task's :class:`TaskInfo`, from ``TF_CONFIG`` or the ``TFK_*`` variables."""
    env = os.environ if env is None else env
    mode = env.get("TFK_MODE") or None
    raw = env.get("TF_CONFIG", "").strip()
    if raw:
        try:
            config = json.loads(raw)
        except ValueError as exc:
            raise ClusterConfigError(f"TF_CONFIG is not valid JSON: {exc}") from None
        if not isinstance(config, Mapping):
            raise ClusterConfigError("TF_CONFIG must be a JSON object")
        cluster = _parse_cluster(config.get("cluster"), "TF_CONFIG")
        task = config.get("task") or {}
        if not isinstance(task, Mapping):
            raise ClusterConfigError("TF_CONFIG: task must be an object")
        role = task.get("type")
        index = task.get("index", 0)
        source = "TF_CONFIG"
    else:
        if not env.get("TFK_CLUSTER"):
            raise ClusterConfigError(
                "no cluster: set TF_CONFIG, or TFK_CLUSTER (JSON address map), TFK_ROLE and "
                "TFK_INDEX (or JOB_COMPLETION_INDEX)"
            )
        try:
            cluster_value = json.loads(env["TFK_CLUSTER"])
        except ValueError as exc:
            raise ClusterConfigError(f"TFK_CLUSTER is not valid JSON: {exc}") from None
        cluster = _parse_cluster(cluster_value, "TFK_CLUSTER")
        role = env.get("TFK_ROLE")
        index = env.get("TFK_INDEX") or env.get("JOB_COMPLETION_INDEX") or "0"
        source = "TFK_ROLE/TFK_INDEX"
    if role not in ROLES:
        raise ClusterConfigError(f"{source}: the task type must be one of {', '.join(ROLES)}, got {role!r}")
    number = index if type(index) is int else plain_int(index)
    if number is None:
        raise ClusterConfigError(f"{source}: the task index must be an integer >= 0, got {index!r}")
    index = number
    if index < 0:
        raise ClusterConfigError(f"{source}: the task index must be >= 0, got {index}")
    if role != "evaluator":
        n = len(cluster.get(role) or [])
        if index >= n:
            raise ClusterConfigError(
                f"{source}: task {role}:{index} is not in the cluster ({role} has {n} address(es))"
            )
    return TaskInfo(cluster, role, index, mode)


def ensure_tf_config(env: MutableMapping[str, str] | None = None) -> TaskInfo:
    """Parse the task environment and make sure ``TF_CONFIG`` is set in ``env``
    (default: ``os.environ``), so TensorFlow's resolvers see the same cluster."""
    if env is None:
        env = os.environ
    info = task_info(env)
    if not env.get("TF_CONFIG", "").strip():
        env["TF_CONFIG"] = info.tf_config_json()
        # Thousands of tasks make TF_CONFIG too long for any exec: TensorFlow reads it from
        # os.environ, and the process's own subprocesses must still start without it.
        from airflow_tfk.runtime.in_process import exec_limit, keep_from_children

        keep_from_children(env, exec_limit())
    return info


def _log(msg: str) -> None:
    print(f"[tfk] {msg}", file=sys.stderr, flush=True)


def _lookup(host: str, port: int, timeout: float | None) -> list[Any]:
    """``socket.getaddrinfo``, given up after ``timeout`` seconds (None: the resolver's own
    bounds). The lookup goes on in a daemon thread: the C resolver cannot be interrupted."""
    if timeout is None:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)

    box: list[Any] = []

    def run() -> None:
        try:
            box.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            box.append(exc)

    thread = threading.Thread(target=run, name="tfk-peer-lookup", daemon=True)
    thread.start()
    thread.join(timeout)
    if not box:
        raise TimeoutError(f"DNS lookup did not answer within {timeout:g}s")
    if isinstance(box[0], OSError):
        raise box[0]
    return list(box[0])


def _probe(addr: str, tcp: bool, connect_timeout: float, dns_timeout: float | None = None) -> str | None:
    """None if ``addr`` is ready, else why not."""
    host, port = split_address(addr)
    try:
        infos = _lookup(host, port, dns_timeout)
    except TimeoutError as exc:
        return str(exc)
    except socket.gaierror as exc:
        return f"DNS lookup failed ({exc.strerror or exc})"
    if not tcp:
        return None
    last = "no address"
    for family, socktype, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, socktype, proto) as sock:
                sock.settimeout(connect_timeout)
                sock.connect(sockaddr)
                return None
        except OSError as exc:
            last = f"TCP connect failed ({exc.strerror or exc})"
    return last


def wait_for_cluster(
    info: TaskInfo,
    *,
    roles: Iterable[str] | None = None,
    tcp: bool = True,
    timeout: float = 600.0,
    interval: float = 1.0,
    connect_timeout: float = 2.0,
    log: Callable[[str], None] = _log,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    stop: Callable[[], bool] | None = None,
) -> None:
    """Wait until every address of ``roles`` (default: all) resolves and, with ``tcp``,
    accepts TCP connections; this task's own address is skipped.

    Logs which address it is waiting for (once per address and then every ~30 s) and
    raises :class:`ClusterWaitTimeout` naming the missing ones after ``timeout`` seconds.
    Use ``tcp=False`` when peers open their ports only after they have waited too (e.g.
    all-reduce workers), otherwise all of them would wait for each other forever.
    ``stop`` (e.g. "SIGTERM came") is asked before each round: true, it raises
    :class:`ClusterWaitStopped` naming who was still awaited.
    """
    wanted = list(roles) if roles is not None else list(info.cluster)
    pending = [
        (r, i, a)
        for r in wanted
        for i, a in enumerate(info.cluster.get(r) or [])
        if not (r == info.role and i == info.index)
    ]
    deadline = clock() + timeout
    last_logged: dict[str, float] = {}
    reasons: dict[str, str] = {}
    while True:
        if stop is not None and stop():
            missing = ", ".join(f"{r}:{i} at {a}" for r, i, a in pending) or "nobody"
            raise ClusterWaitStopped(f"stopped while waiting for {missing}")
        still = []
        for role, i, addr in pending:
            why = _probe(addr, tcp, connect_timeout)
            if why is None:
                if addr in last_logged:
                    log(f"{role}:{i} at {addr} is up")
                continue
            still.append((role, i, addr))
            reasons[addr] = why
            now = clock()
            if addr not in last_logged or now - last_logged[addr] >= 30:
                log(f"waiting for {role}:{i} at {addr}: {why}")
                last_logged[addr] = now
        pending = still
        if not pending:
            return
        if clock() >= deadline:
            missing = ", ".join(f"{r}:{i} at {a} ({reasons.get(a, '?')})" for r, i, a in pending)
            raise ClusterWaitTimeout(f"cluster not ready after {timeout:g}s; still waiting for {missing}")
        sleep(min(interval, max(0.0, deadline - clock())))


def unreachable(
    peers: Iterable[tuple[str, int, str]], connect_timeout: float = 1.0, dns_timeout: float | None = None
) -> list[tuple[str, int, str, str]]:
    """The ``(role, index, address)`` of ``peers`` that do not accept a TCP connection now,
    each with why (``(role, index, address, why)``), probed in parallel: a stopping task
    asks whether the tasks it still waits for are there at all. ``dns_timeout``: a lookup
    that has not answered by then counts as a peer that did not answer."""
    import concurrent.futures

    peers = list(peers)
    if not peers:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(peers))) as pool:
        whys = list(pool.map(lambda p: _probe(p[2], True, connect_timeout, dns_timeout), peers))
    return [(r, i, a, why) for (r, i, a), why in zip(peers, whys, strict=True) if why is not None]


class PeerWatch:
    """Are the tasks a stopping task still waits for gone for good? For a task that got its
    notice (SIGTERM): when its whole cluster is deleted, every task gets one at once, the
    ps and parameter_server workers end at once, and the calls this task has in flight to
    them never return (``ClusterCoordinator`` waits up to an hour for its workers to come
    back, a TF1 session's step for its ps).

    :meth:`gone` says why nothing is left to wait for when a ps (the variables live there),
    or (``workers``) every worker, refused or did not answer a TCP connection at two looks
    in a row: a transient miss of a live cluster does not count.

    A look's DNS lookups are bounded (:attr:`DNS_TIMEOUT`): a deleted peer's name is not in
    the cluster's zone any more, and the resolver then walks its search list and asks
    upstream, which on a cluster with no upstream answer took 48 s (the pod's own resolver
    bound). A live peer's name is answered by the cluster's DNS in milliseconds.
    """

    #: workers probed per look (a random sample of a big cluster)
    SAMPLE = 8
    #: seconds between two log lines of what the looks find, when it does not change
    SAY_EVERY = 10.0
    #: seconds a look waits for a peer's name to resolve
    DNS_TIMEOUT = 1.0

    def __init__(self, info: TaskInfo, workers: bool, connect_timeout: float = 0.5) -> None:
        self.ps = [("ps", i, a) for i, a in enumerate(info.cluster.get("ps") or [])]
        self.workers = [("worker", i, a) for i, a in enumerate(info.cluster.get("worker") or [])]
        if not workers:
            self.workers = []
        self.connect_timeout = connect_timeout
        self._closed_before: set[tuple[str, int]] = set()
        self._said: tuple[str, float] = ("", 0.0)

    def __bool__(self) -> bool:
        return bool(self.ps or self.workers)

    def gone(self) -> str | None:
        import random

        sample = self.workers
        if len(sample) > self.SAMPLE:
            sample = random.sample(sample, self.SAMPLE)
        started = time.monotonic()
        closed = unreachable(
            self.ps + sample, connect_timeout=self.connect_timeout, dns_timeout=self.DNS_TIMEOUT
        )
        self._say(self.ps + sample, closed, time.monotonic() - started)
        keys = {(r, i) for r, i, _, _ in closed}
        confirmed = [c for c in closed if (c[0], c[1]) in self._closed_before]
        self._closed_before = keys
        ps = [c for c in confirmed if c[0] == "ps"]
        workers = [c for c in confirmed if c[0] == "worker"]
        if ps:
            return f"the ps the variables live on are gone ({_shown(ps)})"
        if sample and len(workers) == len(sample):
            return f"every worker is gone ({_shown(workers)})"
        return None

    def _say(
        self, looked: list[tuple[str, int, str]], closed: list[tuple[str, int, str, str]], took: float
    ) -> None:
        """Log what a look found when it changes, else every :attr:`SAY_EVERY` seconds."""
        gone = {(r, i) for r, i, _, _ in closed}
        answering = [f"{r}:{i}" for r, i, _ in looked if (r, i) not in gone]
        text = f"answering: {', '.join(answering) or 'none'}; not: {_shown(closed) if closed else 'none'}"
        now = time.monotonic()
        if text != self._said[0] or now - self._said[1] >= self.SAY_EVERY:
            _log(f"on notice: looked at the peers in {took:.1f}s: {text}")
            self._said = (text, now)


def _shown(closed: list[tuple[str, int, str, str]], most: int = 3) -> str:
    text = ", ".join(f"{r}:{i} at {a}: {why}" for r, i, a, why in closed[:most])
    return text + (f" and {len(closed) - most} more" if len(closed) > most else "")
