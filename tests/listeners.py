"""What a process tree listens on: the local backend's equivalent of a NetworkPolicy is
that every listener is on loopback, so nothing off the machine can reach it."""

from __future__ import annotations

import ipaddress

import psutil


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket of ``pid`` and its children."""
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    out = set()
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            continue
        out |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
    return out


def _is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    # A dual-stack socket bound to 127.0.0.1 shows as ::ffff:127.0.0.1, which Python 3.11's
    # ipaddress does not call loopback; it is reachable only through loopback all the same.
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def not_loopback(pid: int) -> set[tuple[str, int]]:
    """The listeners of ``pid``'s tree reachable from other machines (should be none)."""
    return {(ip, port) for ip, port in listening(pid) if not _is_loopback(ip)}
