"""Keep the local backend's listeners on loopback, whatever the training binds.

TensorFlow's gRPC server has no bind-address option: it always listens on ``0.0.0.0`` (in
practice the dual-stack ``[::]``), and it runs any graph sent to it, unauthenticated. A
local cluster must not open that to the network. So every task process gets a tiny
``LD_PRELOAD`` library whose ``bind()`` turns a wildcard address into loopback
(``127.0.0.1``; ``::ffff:127.0.0.1`` on a dual-stack IPv6 socket, ``::1`` on a v6-only
one) before calling the real ``bind()``. It works for any TF version and any image, and
changes nothing else: explicit addresses, connects and Unix sockets pass through.

The library is compiled once per machine with the system C compiler and cached in
``$XDG_CACHE_HOME/airflow-tfk/loopback/`` (keyed by its source), serialised by a file
lock; a machine without a compiler gets a :class:`~airflow_tfk.core.errors.LocalMachineError`
unless the backend is told ``loopback_only=False``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from airflow_tfk.core.errors import LocalMachineError

SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real;
    if (!real) real = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in copy = *(const struct sockaddr_in *)addr;
        if (copy.sin_addr.s_addr == htonl(INADDR_ANY)) {
            copy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real(fd, (const struct sockaddr *)&copy, sizeof copy);
        }
    } else if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 copy = *(const struct sockaddr_in6 *)addr;
        if (IN6_IS_ADDR_UNSPECIFIED(&copy.sin6_addr)) {
            int v6only = 0;
            socklen_t olen = sizeof v6only;
            getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &olen);
            if (v6only) {
                copy.sin6_addr = in6addr_loopback;
            } else {  /* dual stack: the IPv4-mapped 127.0.0.1 accepts IPv4 loopback only */
                static const unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                         0xff, 0xff, 127, 0, 0, 1};
                for (int i = 0; i < 16; i++) copy.sin6_addr.s6_addr[i] = mapped[i];
            }
            return real(fd, (const struct sockaddr *)&copy, sizeof copy);
        }
    }
    return real(fd, addr, len);
}
"""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "airflow-tfk", "loopback")


def preload_library() -> str:
    """Path of the compiled library (built on first use, then reused)."""
    key = hashlib.sha256(f"{SOURCE}|{os.uname().machine}".encode()).hexdigest()[:16]
    directory = cache_dir()
    target = directory / f"loopback-bind-{key}.so"
    if target.is_file():
        return str(target)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise LocalMachineError(
            "loopback_only",
            "no C compiler (cc) on this machine to build the library that keeps TensorFlow's "
            "gRPC servers on 127.0.0.1; install one, or pass loopback_only=False to the local "
            "backend (its task ports are then reachable from the network)",
        )
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return str(target)
        with tempfile.TemporaryDirectory(dir=directory) as tmp:
            src = Path(tmp, "loopback.c")
            src.write_text(SOURCE, encoding="utf-8")
            out = Path(tmp, "loopback.so")
            proc = subprocess.run(
                [compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(src), "-ldl"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if proc.returncode != 0:
                raise LocalMachineError(
                    "loopback_only",
                    f"could not build the loopback library with {compiler}: "
                    f"{(proc.stderr or proc.stdout).strip()[-500:]}",
                )
            os.chmod(out, 0o755)
            os.replace(out, target)
    return str(target)
