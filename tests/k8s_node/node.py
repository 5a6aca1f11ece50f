"""One real Kubernetes node next to the control plane of tests/k8s (no pytest dependency).

Layout (everything private to one session; several sessions can run side by side):

- a *holder*: ``unshare --net --mount --pid --fork --mount-proc --kill-child=SIGKILL``. Its
  PID 1 sets up the namespaces (loopback up; a veth pair carrying the node IP 10.200.0.2,
  since this kernel has no ``dummy`` device; private tmpfs on ``/run`` and ``/var/log``,
  where containerd's state and the kubelet's ``/var/log/containers`` symlinks go, and on
  containerd's root: images and container layers live in memory) and sleeps.
- containerd (+ runc, CNI bridge on ``cni0`` 10.88.0.0/16), the kubelet and CoreDNS run
  inside all three namespaces (``nsenter``); pod cgroups under a cgroup root of their own.
- the control plane (tests/k8s/harness.py, unchanged) runs in the namespace's network only:
  it is started from one long-lived thread that ``setns``-ed into the network namespace, so
  its children inherit it (the apiserver must reach the kubelet at the node IP for logs,
  and CoreDNS and the kubelet must reach the apiserver).
- the test process stays in the host's namespaces and reaches the apiserver through a
  loopback port forward (a thread here: accept on the host's 127.0.0.1, connect inside the
  namespace). Why a forward and not running the tier inside the namespace: pytest, Airflow
  and ``airflow dags test`` subprocesses then need nothing special, and the host's network
  gets no device, address or route (a veth to the host would).

Tear-down: SIGKILL to the namespace's PID 1 kills every process in it (containerd, shims,
containers, kubelet, CoreDNS: they are all in the PID namespace), which also drops the
network namespace, its veth and bridge, and every mount; then the control plane stops and
the pod cgroups are removed. :func:`leftovers` reports what would be left.

Images without a registry: a rootfs packed as a one-layer ``docker save`` tar, imported with
``ctr -n k8s.io images import``. Pods use ``imagePullPolicy: Never``. TensorFlow is not in the
image: containerd's ``base_runtime_spec`` bind-mounts the host's ``/usr``, the Python
installation, the project checkout (at :data:`POD_SRC`) and its venv (at :data:`POD_VENV`)
read-only into every container, as a node image with TensorFlow preinstalled would provide
it. The checkout and the venv get fixed paths because a host path can be anywhere, /tmp
included, and a pod volume mounted over a parent of it (the serving and TensorBoard pods'
``/tmp``) would hide it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests"))
from k8s import harness  # noqa: E402

BUILD_SCRIPT = REPO / "tests" / "k8s" / "node" / "build.sh"
NODE_NAME = "tfk-node"
NODE_IP = "10.200.0.2"
POD_SUBNET = "10.88.0.0/16"
#: The image every training/serving/TensorBoard pod of the tier uses (see build_images).
TRAIN_IMAGE = "tfk.local/train:1"
PAUSE_IMAGE = "tfk.local/pause:1"
#: containerd runtime handler without the base spec's host mounts (self-contained images).
IMAGE_RUNTIME_HANDLER = "image"
#: Where every container of the tier sees the checkout and the venv of the test process:
#: paths no pod volume of the provider uses (see _bind_mounts).
POD_SRC = "/opt/tfk/src"
POD_VENV = "/opt/tfk/venv"
#: Pod volumes the provider's templates mount over the image (serving and TensorBoard).
POD_VOLUME_PATHS = ("/tmp",)
CGROUP_BASE = Path("/sys/fs/cgroup")


class NodeError(RuntimeError):
    pass


# --------------------------------------------------------------------------- prerequisites


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run the tier (empty when it can), each named exactly."""
    out = []
    if os.geteuid() != 0:
        out.append("root (euid 0): namespaces, cgroups and mounts")
    for tool in ("unshare", "nsenter", "ip", "apt-get", "dpkg"):
        if shutil.which(tool) is None:
            out.append(f"the '{tool}' command")
    if not (CGROUP_BASE / "memory").is_dir() and not (CGROUP_BASE / "cgroup.controllers").exists():
        out.append(f"cgroups (no memory controller under {CGROUP_BASE})")
    if os.geteuid() == 0 and shutil.which("unshare"):
        r = subprocess.run(
            ["unshare", "--net", "--mount", "--pid", "--fork", "true"], capture_output=True, text=True
        )
        if r.returncode != 0:
            out.append(f"unshare --net --mount --pid: {r.stderr.strip()}")
    return out


def ensure_built() -> Path:
    """The node directory of tests/k8s/node/build.sh (built on first use, cached)."""
    return harness.run_build(BUILD_SCRIPT, "AIRFLOW_TFK_K8S_NODE_DIR", NodeError)


# --------------------------------------------------------------------------- images


def docker_save_tar(
    dest: Path, ref: str, files: dict[str, tuple[int, bytes | None]], config: dict[str, Any]
) -> None:
    """Write a one-layer ``docker save`` archive of image ``ref``.

    ``files``: path in the image -> (mode, content); content None is a directory, bytes
    starting with ``b"->"`` a symlink to the rest.
    """
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        for path in sorted(files):
            mode, content = files[path]
            info = tarfile.TarInfo(path.lstrip("/"))
            info.mode, info.mtime = mode, 0
            if content is None:
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif content.startswith(b"->"):
                info.type, info.linkname = tarfile.SYMTYPE, content[2:].decode()
                t.addfile(info)
            else:
                info.size = len(content)
                t.addfile(info, io.BytesIO(content))
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    cfg = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "tests/k8s_node/node.py"}],
    }
    cfg_bytes = json.dumps(cfg, sort_keys=True).encode()
    cfg_name = hashlib.sha256(cfg_bytes).hexdigest() + ".json"
    manifest = [{"Config": cfg_name, "RepoTags": [ref], "Layers": ["layer.tar"]}]
    with tarfile.open(dest, "w") as out:
        for name, data in (
            ("layer.tar", layer_bytes),
            (cfg_name, cfg_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            out.addfile(info, io.BytesIO(data))


def _skeleton(extra_dirs: list[str]) -> dict[str, tuple[int, bytes | None]]:
    """A rootfs whose /usr comes from the node (see the base runtime spec): the merged-/usr
    symlinks, the few /etc files a process expects, the mount points of the bind mounts."""
    files: dict[str, tuple[int, bytes | None]] = {
        "bin": (0o777, b"->usr/bin"),
        "sbin": (0o777, b"->usr/sbin"),
        "lib": (0o777, b"->usr/lib"),
        "lib64": (0o777, b"->usr/lib64"),
        "usr": (0o755, None),
        "etc": (0o755, None),
        "etc/passwd": (0o644, b"root:x:0:0:root:/root:/bin/sh\ntfk:x:1000:1000:tfk:/tmp:/bin/sh\n"),
        "etc/group": (0o644, b"root:x:0:\ntfk:x:1000:\n"),
        "etc/nsswitch.conf": (0o644, b"passwd: files\ngroup: files\nhosts: files dns\n"),
        "tmp": (0o1777, None),
        "root": (0o755, None),
        "proc": (0o755, None),
        "sys": (0o755, None),
        "dev": (0o755, None),
        "run": (0o755, None),
        "var": (0o755, None),
        "var/tmp": (0o1777, None),
        # The stand-in model server under TF Serving's command name (templates/serving).
        "opt/tfk/bin": (0o755, None),
        "opt/tfk/bin/tensorflow_model_server": (
            0o755,
            b'#!/bin/sh\nexec python -m airflow_tfk.runtime.model_server "$@"\n',
        ),
    }
    for d in extra_dirs:
        parts = Path(d.lstrip("/")).parts
        for i in range(1, len(parts) + 1):
            files.setdefault("/".join(parts[:i]), (0o755, None))
    return files


# --------------------------------------------------------------------------- port forward


class _Forward:
    """Accept on the host's 127.0.0.1:``port``; connect to 127.0.0.1:``port`` inside the
    network namespace (sockets are created by ``connect_in_ns``, which runs in the thread
    that joined it). One selector thread pumps every connection."""

    def __init__(self, port: int, connect_in_ns) -> None:
        self.port, self._connect = port, connect_in_ns
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="tfk-node-forward", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        peers: dict[socket.socket, socket.socket] = {}
        while not self._stop:
            for key, _ in self._sel.select(0.2):
                s = key.fileobj
                if s is self._listener:
                    try:
                        c, _addr = self._listener.accept()
                        u = self._connect(self.port)
                    except OSError:
                        with contextlib.suppress(Exception):
                            c.close()
                        continue
                    for x in (c, u):
                        x.setblocking(False)
                        self._sel.register(x, selectors.EVENT_READ, None)
                    peers[c], peers[u] = u, c
                    continue
                assert isinstance(s, socket.socket)
                other = peers.get(s)
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data and other is not None:
                    try:
                        other.setblocking(True)
                        other.sendall(data)
                        other.setblocking(False)
                        continue
                    except OSError:
                        pass
                for x in (s, other):
                    if x is not None and x in peers:
                        peers.pop(x, None)
                        with contextlib.suppress(Exception):
                            self._sel.unregister(x)
                        x.close()
        for x in list(peers):
            x.close()
        self._listener.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)


# --------------------------------------------------------------------------- the node


@dataclass
class Node:
    """Control plane + one real node. :meth:`start`, then :meth:`stop` (always)."""

    workdir: Path
    node_dir: Path
    #: The node's name, its IP (on the veth ``tfk0``) and its pods' subnet (the ``cni0``
    #: bridge): the single node keeps the defaults; several nodes (cluster.py) differ here.
    name: str = NODE_NAME
    ip: str = NODE_IP
    pod_subnet: str = POD_SUBNET
    #: Where the kubelet finds CoreDNS and the apiserver: this namespace by default, the
    #: shared namespace of cluster.py for a node that joins a control plane it does not own.
    dns_ip: str = ""
    api_host: str = "127.0.0.1"
    owns_cp: bool = True
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    cp: harness.ControlPlane | None = None
    holder: subprocess.Popen | None = None
    ns_pid: int = 0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    _ns_exec: concurrent.futures.ThreadPoolExecutor | None = None
    _forward: _Forward | None = None
    _ns_port: int = 0
    _cgroups_made: list[Path] = field(default_factory=list)
    _pidns: int = 0

    # ---- paths
    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        assert self.cp is not None
        return self.cp.kubeconfig

    @property
    def cgroup_root(self) -> str:
        """Pods' cgroups go under the memory cgroup this process runs in (so a harness that
        accounts or limits our memory also covers the pods), in a directory of our own."""
        parent = "/"
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                if "memory" in controllers.split(",") or (controllers == "" and parent == "/"):
                    parent = path or "/"
        return str(Path(parent) / f"tfk-node-{self.session}")

    def _hierarchies(self) -> list[Path]:
        """cgroup v1 hierarchies (or the v2 root) that can hold processes."""
        if (CGROUP_BASE / "cgroup.controllers").exists():
            return [CGROUP_BASE]
        return sorted(h for h in CGROUP_BASE.iterdir() if (h / "cgroup.procs").exists())

    def _make_cgroup_root(self) -> None:
        """The kubelet refuses a cgroupRoot that does not exist in every hierarchy."""
        for hier in self._hierarchies():
            d = hier
            for part in Path(self.cgroup_root).parts[1:]:
                parent, d = d, d / part
                if not d.exists():
                    d.mkdir()
                    self._cgroups_made.append(d)
                    if hier.name == "cpuset":  # a new cpuset is empty: copy the parent's
                        for f in ("cpuset.cpus", "cpuset.mems"):
                            (d / f).write_text((parent / f).read_text())

    @property
    def bin(self) -> Path:
        return self.node_dir / "bin"

    def api_client(self, token: str | None = None):
        assert self.cp is not None
        return self.cp.api_client(token)

    # ---- start
    @classmethod
    def start(cls, workdir: Path | None = None, *, log=print, timeout: float = 180) -> Node:
        missing = missing_prerequisites()
        if missing:
            raise NodeError("this machine lacks: " + "; ".join(missing))
        node = cls(
            workdir=Path(workdir or tempfile.mkdtemp(prefix="tfk-node-")),
            node_dir=ensure_built(),
        )
        try:
            node._start(log, timeout)
        except BaseException:
            node.stop()
            raise
        return node

    def _in_ns(self, fn, *args):
        assert self._ns_exec is not None
        return self._ns_exec.submit(fn, *args).result()

    def _nsenter(self) -> list[str]:
        return ["nsenter", f"--target={self.ns_pid}", "--net", "--mount", "--pid", "--"]

    def _run_in_ns(self, argv: list[str], timeout: float = 120) -> str:
        r = subprocess.run(
            self._nsenter() + argv, capture_output=True, text=True, timeout=timeout, env=self._env()
        )
        if r.returncode != 0:
            raise NodeError(f"{argv[0]} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
        return r.stdout

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        fh = open(self.logs / f"{name}.log", "ab")  # owned by the child
        try:
            self.procs[name] = subprocess.Popen(
                self._nsenter() + argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env or self._env(),
                start_new_session=True,
            )
        finally:
            fh.close()

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ")}
        env["PATH"] = f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        env["HOME"] = str(self.workdir)
        return env

    def _wait(self, what: str, ok, limit: float, procs: list[str] = ()) -> None:  # type: ignore[assignment]
        def alive() -> None:
            for name in procs:
                p = self.procs[name]
                if p.poll() is not None:
                    tail = harness.tail(self.logs / f"{name}.log")
                    raise NodeError(f"{name} exited with {p.returncode}; last log lines:\n{tail}")

        logs = {name: self.logs / f"{name}.log" for name in procs}
        harness.wait_until(what, ok, limit, alive, logs, self.logs, NodeError)

    def _start(self, log, timeout: float) -> None:
        t0 = time.monotonic()
        self._start_namespaces()
        self._start_containerd()
        self._start_control_plane()
        self._start_kubelet(timeout)
        self.timings["total"] = time.monotonic() - t0
        assert self.cp is not None
        log(
            f"k8s node {self.name} Ready in {self.timings['total']:.1f}s "
            + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items() if k != "total")
            + f" (apiserver {self.cp.server}, logs {self.logs})"
        )

    def _start_namespaces(self, net_setup: list[str] | None = None) -> None:
        """The holder; ``net_setup`` replaces the default network (a veth carrying the node
        IP whose peer stays in the namespace) with the caller's commands."""
        t0 = time.monotonic()
        if net_setup is None:
            net_setup = [
                "ip link add tfk0 type veth peer name tfk1",
                f"ip addr add {self.ip}/24 dev tfk0",
                "ip link set tfk0 up",
                "ip link set tfk1 up",
            ]
        self.logs.mkdir(parents=True, exist_ok=True)
        # 1. The namespaces. PID 1 of the new PID namespace prepares them and sleeps; it dies
        # with `unshare` (--kill-child), which dies with this process (PR_SET_PDEATHSIG).
        setup = " && ".join(
            [
                "mount -t tmpfs -o mode=0755 tmpfs /run",
                "mount -t tmpfs -o mode=0755 tmpfs /var/log",
                # The kubelet keeps its device-plugin socket and serving certificate under
                # the fixed /var/lib/kubelet, not its --root-dir: one of this node's own, or
                # two nodes started together race for the socket (CI: "bind: address
                # already in use", the second kubelet exits).
                "mkdir -p /var/lib/kubelet",
                "mount -t tmpfs -o mode=0755 tmpfs /var/lib/kubelet",
                # containerd's content store and snapshots in memory too: importing the
                # real training image (~2 GB, test_image.py) and deleting it at the end
                # each took ~50 s on this disk (ext4 with online discard).
                f"mkdir -p {self.workdir / 'containerd'}",
                f"mount -t tmpfs -o mode=0711 tmpfs {self.workdir / 'containerd'}",
                "ip link set lo up",
                *net_setup,
                "echo ready",
                "exec sleep infinity",
            ]
        )
        self.holder = subprocess.Popen(
            [
                "unshare",
                "--net",
                "--mount",
                "--pid",
                "--fork",
                "--mount-proc",
                "--propagation",
                "private",
                "--kill-child=SIGKILL",
                "sh",
                "-c",
                setup,
            ],
            stdout=subprocess.PIPE,
            stderr=open(self.logs / "holder.log", "ab"),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=harness._die_with_parent,
        )
        assert self.holder.stdout is not None
        if self.holder.stdout.readline().strip() != b"ready":
            raise NodeError(f"namespace setup failed: {harness.tail(self.logs / 'holder.log')}")
        children = Path(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children").read_text().split()
        self.ns_pid = int(children[0])
        self._pidns = os.stat(f"/proc/{self.ns_pid}/ns/pid").st_ino
        netns = os.open(f"/proc/{self.ns_pid}/ns/net", os.O_RDONLY)
        self._ns_exec = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="tfk-node-netns", initializer=_setns_net, initargs=(netns,)
        )
        self.timings["namespaces"] = time.monotonic() - t0

    def _start_containerd(self) -> None:
        t1 = time.monotonic()
        self._write_containerd_config()
        self._spawn("containerd", ["containerd", "--config", str(self.workdir / "containerd.toml")])
        sock = "/run/containerd/containerd.sock"
        # ctr waits ~10 s on a socket that does not exist yet: look for the socket first.
        self._wait(
            "containerd socket",
            lambda: os.path.exists(f"/proc/{self.ns_pid}/root{sock}") and self._ctr("version"),
            60,
            ["containerd"],
        )
        self.build_images()
        self.timings["containerd+images"] = time.monotonic() - t1

    def _start_control_plane(self, api_args: list[str] = ()) -> None:  # type: ignore[assignment]
        """In the namespace's network, from the thread that joined it."""
        t2 = time.monotonic()
        self.cp = self._in_ns(
            lambda: harness.ControlPlane.start(
                self.workdir / "cp",
                nodes=0,
                log=lambda _m: None,
                extra_args={
                    "kube-apiserver": [
                        # Logs/exec: reach the kubelet at the node IP, not by its name.
                        "--kubelet-preferred-address-types=InternalIP,Hostname",
                        *api_args,
                    ]
                },
            )
        )
        self.timings["control plane"] = time.monotonic() - t2
        # The test process reaches the apiserver through a loopback forward.
        port = int(self.cp.server.rsplit(":", 1)[1])
        self._ns_port = port
        try:
            self._forward = _Forward(port, self._connect_in_ns)
        except OSError:
            free = harness._free_port()
            self._forward = _Forward(free, self._connect_in_ns_to(port))
            self.cp.server = f"https://127.0.0.1:{free}"
            harness.write_kubeconfig(
                self.cp.kubeconfig, self.cp.server, self.cp.ca_file, self.cp.admin_token, "tfk-admin"
            )

    def _start_kubelet(self, timeout: float, coredns: bool = True) -> None:
        """The kubelet (client certificate system:node:<name>) and, unless another namespace
        serves it, CoreDNS."""
        assert self.cp is not None
        t3 = time.monotonic()
        port = self._ns_port
        self._make_cgroup_root()
        self._write_kubelet_files(port)
        self._spawn(
            "kubelet",
            [
                "kubelet",
                f"--config={self.workdir / 'kubelet.yaml'}",
                f"--kubeconfig={self.workdir / 'kubelet.kubeconfig'}",
                f"--root-dir={self.workdir / 'kubelet'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.ip}",
                "--v=1",
            ],
        )
        if not coredns:
            self._wait("node Ready", self._node_ready, timeout, ["kubelet", "containerd"])
            self.timings["kubelet->Ready"] = time.monotonic() - t3
            return
        self._start_coredns()
        self._wait("node Ready", self._node_ready, timeout, ["kubelet", "containerd", "coredns"])
        self.timings["kubelet->Ready"] = time.monotonic() - t3
        self._wait_coredns()

    def _start_coredns(self) -> None:
        """CoreDNS on every address of the namespace, reading the apiserver on its loopback."""
        assert self.cp is not None
        port = self._ns_port
        ns_admin = self.workdir / "coredns.kubeconfig"
        harness.write_kubeconfig(
            ns_admin, f"https://127.0.0.1:{port}", self.cp.ca_file, self.cp.admin_token, "coredns"
        )
        (self.workdir / "Corefile").write_text(
            ".:53 {\n    errors\n    health :8080\n    ready :8181\n"
            "    kubernetes cluster.local {\n"
            f"        kubeconfig {ns_admin} tfk-test\n"
            "        ttl 1\n    }\n}\n"
        )
        self._spawn("coredns", ["coredns", "-conf", str(self.workdir / "Corefile")])

    def _wait_coredns(self) -> None:
        self._wait(
            "CoreDNS ready",
            lambda: self._in_ns(harness._http_ok, f"http://{self.ip}:8181/ready"),
            60,
            ["coredns"],
        )

    def _connect_in_ns(self, port: int) -> socket.socket:
        return self._in_ns(socket.create_connection, ("127.0.0.1", port), 10)

    def _connect_in_ns_to(self, target: int):
        return lambda _port: self._connect_in_ns(target)

    @contextlib.contextmanager
    def forward(self, host: str, port: int):
        """A port on the host's 127.0.0.1 reaching ``host:port`` inside the node's network
        namespace (a pod IP), the way the apiserver is reached: for what the API server's
        service proxy cannot carry, such as gRPC (HTTP/2). Yields the local port."""
        fwd = _Forward(0, lambda _port: self._in_ns(socket.create_connection, (host, port), 10))
        try:
            yield fwd._listener.getsockname()[1]
        finally:
            fwd.close()

    def _ctr(self, *args: str, timeout: float = 120) -> str:
        return self._run_in_ns(
            ["ctr", "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", *args], timeout
        )

    def _node_ready(self) -> bool:
        assert self.cp is not None
        try:
            node = self.cp._request("GET", f"/api/v1/nodes/{self.name}")
        except Exception:  # not registered yet
            return False
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    # ---- configuration files
    def _bind_mounts(self) -> list[tuple[str, str]]:
        """(host path, container path) that every container gets read-only: /usr (libc,
        libstdc++), the Python installation behind the venv, the checkout at POD_SRC and the
        venv of this process at POD_VENV.

        The Python installation keeps its host path: the venv's ``bin/python`` is an
        absolute symlink to it and ``pyvenv.cfg`` names it.
        """
        py_home = os.path.realpath(sys.base_prefix)
        for hidden in POD_VOLUME_PATHS:
            if py_home == hidden or py_home.startswith(hidden + "/"):
                raise NodeError(
                    f"the Python installation {py_home} is under {hidden}, which the serving"
                    " and TensorBoard pods mount a volume over; use a Python outside it"
                )
        venv = os.path.realpath(sys.prefix)
        if venv == py_home:
            raise NodeError(f"the tier runs from a venv (sys.prefix is {sys.prefix})")
        return [("/usr", "/usr"), (py_home, py_home), (str(REPO), POD_SRC), (venv, POD_VENV)]

    def _write_containerd_config(self) -> None:
        w = self.workdir
        (w / "cni").mkdir(exist_ok=True)
        (w / "cni" / "10-tfk.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "tfk",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": False,  # no iptables here, and no traffic leaves
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "dataDir": str(w / "cni-ipam"),
                                "ranges": [[{"subnet": self.pod_subnet}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                            },
                        }
                    ],
                }
            )
        )
        # The default OCI spec plus the read-only bind mounts (see _bind_mounts).
        spec = json.loads(
            subprocess.run(
                [str(self.bin / "ctr"), "oci", "spec"], capture_output=True, text=True, check=True
            ).stdout
        )
        for src, dest in self._bind_mounts():
            spec["mounts"].append(
                {
                    "destination": dest,
                    "type": "bind",
                    "source": src,
                    "options": ["rbind", "ro", "nosuid", "nodev"],
                }
            )
        (w / "base-spec.json").write_text(json.dumps(spec))
        # containerd 2 configuration format (version 3): the CRI plugin is split into
        # io.containerd.cri.v1.runtime (containers, CNI) and io.containerd.cri.v1.images.
        rt = "plugins.'io.containerd.cri.v1.runtime'"
        (w / "containerd.toml").write_text(
            f"""version = 3
root = "{w / "containerd"}"
state = "/run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.internal.v1.opt",
  "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
[{rt}]
  # This VM lacks CAP_SYS_RESOURCE in the bounding set: runc cannot set -998.
  restrict_oom_score_adj = true
  enable_selinux = false
  [{rt}.cni]
    bin_dirs = ["{self.node_dir / "cni"}"]
    conf_dir = "{w / "cni"}"
  [{rt}.containerd]
    default_runtime_name = "runc"
    [{rt}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      base_runtime_spec = "{w / "base-spec.json"}"
      [{rt}.containerd.runtimes.runc.options]
        BinaryName = "{self.bin / "runc"}"
        SystemdCgroup = false
    # A self-contained image alone, without the host mounts above (a RuntimeClass with
    # this handler: test_image.py runs images/training's real image with it).
    [{rt}.containerd.runtimes.{IMAGE_RUNTIME_HANDLER}]
      runtime_type = "io.containerd.runc.v2"
      [{rt}.containerd.runtimes.{IMAGE_RUNTIME_HANDLER}.options]
        BinaryName = "{self.bin / "runc"}"
        SystemdCgroup = false
"""
        )

    def _write_kubelet_files(self, port: int) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        assert self.cp is not None
        import datetime as dt

        pki = self.cp.pki
        ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
        ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                        x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{self.name}"),
                    ]
                )
            )
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        crt, key_file = pki / f"kubelet-{self.name}.crt", pki / f"kubelet-{self.name}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )
        os.chmod(key_file, 0o600)
        kc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tfk",
                    "cluster": {
                        "server": f"https://{self.api_host}:{port}",
                        "certificate-authority": str(pki / "ca.crt"),
                        # The serving certificate names 127.0.0.1 and `kubernetes`, not the
                        # shared namespace's address that other nodes dial.
                        "tls-server-name": "kubernetes",
                    },
                }
            ],
            "users": [
                {
                    "name": "kubelet",
                    "user": {
                        "client-certificate": str(crt),
                        "client-key": str(key_file),
                    },
                }
            ],
            "contexts": [{"name": "tfk", "context": {"cluster": "tfk", "user": "kubelet"}}],
            "current-context": "tfk",
        }
        (self.workdir / "kubelet.kubeconfig").write_text(json.dumps(kc))
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # kubelet >= 1.35 refuses cgroup v1 otherwise
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
            "address": self.ip,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            # The test apiserver has no kubelet client certificate (see the note).
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [self.dns_ip or self.ip],
            "clusterDomain": "cluster.local",
            "resolvConf": "",
            "podLogsDir": "/var/log/pods",  # `podLogsDirectory` would be silently ignored
            "failSwapOn": False,
            "makeIPTablesUtilChains": False,  # no iptables binary
            "localStorageCapacityIsolation": True,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "4s",
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "maxPods": 40,
            "protectKernelDefaults": False,
            "enableControllerAttachDetach": True,
        }
        (self.workdir / "kubelet.yaml").write_text(json.dumps(cfg))

    # ---- images
    def build_images(self) -> None:
        """Import the pause image and the training image (skeleton + base-spec mounts)."""
        idir = self.workdir / "images"
        idir.mkdir(exist_ok=True)
        pause = (self.bin / "pause").read_bytes()
        docker_save_tar(
            idir / "pause.tar",
            PAUSE_IMAGE,
            {"pause": (0o755, pause)},
            {"Entrypoint": ["/pause"], "User": "65535:65535"},
        )
        docker_save_tar(
            idir / "train.tar",
            TRAIN_IMAGE,
            _skeleton([dest for _, dest in self._bind_mounts()]),
            {
                "Env": [
                    f"PATH=/opt/tfk/bin:{POD_VENV}/bin:/usr/local/bin:/usr/bin:/bin",
                    # The venv's editable install names the host path of the checkout,
                    # which the container does not have.
                    f"PYTHONPATH={POD_SRC}",
                    "PYTHONUNBUFFERED=1",
                    "HOME=/tmp",
                ],
                "WorkingDir": "/",
            },
        )
        for tar in ("pause.tar", "train.tar"):
            self._ctr("images", "import", str(idir / tar))
        # The same image under the serving and TensorBoard defaults, so a DAG that leaves
        # them unset runs the stand-ins here (nothing can be pulled on this machine).
        from airflow_tfk.serving.spec import DEFAULT_SERVING_IMAGE, DEFAULT_TENSORBOARD_IMAGE

        for ref in (DEFAULT_SERVING_IMAGE, DEFAULT_TENSORBOARD_IMAGE):
            self._ctr("images", "tag", "--force", TRAIN_IMAGE, _normalized(ref))

    def import_image(self, path: Path) -> None:
        # ~2 GB hashed and unpacked: 30-45 s on a quiet machine, more than 120 s at load ~27
        # (containerd kept going and finished after ctr had been stopped).
        self._ctr("images", "import", str(path), timeout=900)

    def remove_image(self, ref: str) -> None:
        self._ctr("images", "rm", "--sync", _normalized(ref))

    # ---- inspection
    def container_processes(self) -> list[int]:
        """PIDs (host view) in the pod cgroups of this node."""
        pids: list[int] = []
        for hier in self._hierarchies():
            root = hier / self.cgroup_root.lstrip("/")
            if root.is_dir():
                for procs in root.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError):
                        pids += [int(x) for x in procs.read_text().split()]
        return sorted(set(pids))

    def running_containers(self) -> list[str]:
        return [line for line in self._ctr("tasks", "ls", "-q").split() if line]

    # ---- stop
    def stop(self) -> None:
        if self._forward is not None:
            self._forward.close()
            self._forward = None
        # Everything of the node is in the PID namespace: its PID 1 dying kills it all.
        if self.ns_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.ns_pid, signal.SIGKILL)
        if self.holder is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.holder.wait(30)  # `unshare` exits when its child, PID 1, is gone
            with contextlib.suppress(ProcessLookupError):
                self.holder.kill()
            self.holder.wait(30)
            if self.holder.stdout is not None:
                self.holder.stdout.close()
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(30)
        # The PID namespace is empty once its PID 1 is reaped.
        deadline = time.monotonic() + 30
        while self.ns_pid and Path(f"/proc/{self.ns_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.cp is not None and self.owns_cp:
            self.cp.stop()
        if self._ns_exec is not None:
            self._ns_exec.shutdown(wait=True)
            self._ns_exec = None
        self._remove_cgroups()

    def _remove_cgroups(self) -> None:
        """Everything below our cgroup root (the kubelet's), then the directories we made."""
        deadline = time.monotonic() + 30
        dirs: list[Path] = []
        for hier in self._hierarchies():
            root = hier / self.cgroup_root.lstrip("/")
            if root.is_dir():
                dirs += [p for p in root.rglob("*") if p.is_dir()]
        dirs.sort(key=lambda p: -len(p.parts))
        ours = [d for d in self._cgroups_made if d.name == f"tfk-node-{self.session}"]
        for d in dirs + ours:
            while d.exists():
                try:
                    d.rmdir()
                except FileNotFoundError:
                    break
                except OSError:  # busy until the last process in it is reaped
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
        # Parents we had to create: removed when empty (another session may share them).
        for d in sorted(set(self._cgroups_made) - set(ours), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()

    def remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def leftovers(self, removed: bool = True) -> list[str]:
        """What the node left on the host after :meth:`stop` (and :meth:`remove`)."""
        out = []
        for hier in self._hierarchies():
            if (hier / self.cgroup_root.lstrip("/")).exists():
                out.append(f"cgroup {hier / self.cgroup_root.lstrip('/')}")
        pids = [self.ns_pid] + [p.pid for p in self.procs.values()]
        if self.holder is not None:
            pids.append(self.holder.pid)
        if self.cp is not None:
            pids += [p.popen.pid for p in self.cp.procs if p.popen is not None]
        for pid in pids:
            if pid and Path(f"/proc/{pid}").exists() and "Z" not in _proc_state(pid):
                out.append(f"process {pid}")
        # Anything still in the node's PID namespace (containerd, shims, kubelet, CoreDNS;
        # containers are in the pod cgroups). Not "any process running the cached binaries":
        # another session may run them at the same time.
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or not self._pidns:
                continue
            with contextlib.suppress(OSError):
                if os.stat(d / "ns" / "pid").st_ino == self._pidns:
                    out.append(f"process {d.name} ({os.readlink(d / 'exe')})")
        out += [f"container process {p}" for p in self.container_processes()]
        with open("/proc/self/mountinfo") as f:
            for line in f:
                if str(self.workdir) in line or "tfk-node" in line.split()[4]:
                    out.append(f"mount {line.split()[4]}")
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        for name in ("tfk0", "tfk1", "cni0"):
            if f": {name}" in links or f": {name}@" in links:
                out.append(f"network device {name} on the host")
        if removed and self.workdir.exists():
            out.append(f"directory {self.workdir}")
        return out


def _normalized(ref: str) -> str:
    """The full reference containerd stores for a short Docker-style image name."""
    name = ref if "/" in ref.split(":")[0] else f"library/{ref}"
    first = name.split("/")[0]
    if "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    return name


def _setns_net(fd: int) -> None:
    """Move the calling thread (only it: a network namespace is per thread) into ``fd``'s
    network namespace. ctypes, since os.setns needs Python 3.12."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
        raise OSError(ctypes.get_errno(), "setns(CLONE_NEWNET)")


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
