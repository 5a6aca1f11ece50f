"""A real Kubernetes control plane for the integration tests (and benchmarks).

Processes, all on 127.0.0.1 with free ports, from the binaries ``build.sh`` caches:

- etcd (embedded go.etcd.io/etcd/server/v3, in the ``controlplane`` multi-call binary)
- kube-apiserver: TLS with a generated CA, static-token authentication, RBAC, the default
  admission plugins, service-account token issuing
- kube-controller-manager: the default controller set (Job, StatefulSet, garbage collector,
  namespace, service-account and service-account-token controllers, ...)
- kube-scheduler
- kwok: simulates the nodes (annotated ``kwok.x-k8s.io/node=fake``) and the pod
  lifecycle following ``stages.yaml`` (see the annotations there and in :class:`Kwok`).

Nothing here depends on pytest; ``tests/k8s_integration/conftest.py`` wraps it in a
session fixture. Usage::

    from k8s.harness import ControlPlane
    with ControlPlane.start(workdir) as cp:
        api = cp.api_client()           # kubernetes.client.ApiClient as cluster-admin
        print(cp.kubeconfig)            # admin kubeconfig file
"""

from __future__ import annotations

import base64
import collections
import contextlib
import datetime as dt
import inspect
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
STAGES = HERE / "stages.yaml"

#: The annotation KWOK uses to pick the nodes it manages (see --manage-nodes-with-annotation-selector).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
#: Annotations understood by stages.yaml.
EXIT_CODE = "kwok.tfk.test/exit-code"
EXIT_REASON = "kwok.tfk.test/reason"
EXIT_MESSAGE = "kwok.tfk.test/message"
EXIT_DELAY = "kwok.tfk.test/delay"
WAITING_REASON = "kwok.tfk.test/waiting-reason"
# Kubernetes 1.37's Workload API (PodGroup) and the scheduler's GangScheduling plugin, both
# behind this beta gate that is off by default; pods that name no PodGroup are unaffected.
WORKLOAD_GATE = "--feature-gates=GenericWorkload=true"
#: A nodeSelector no node will ever match: the pod stays Pending/Unschedulable.
UNSCHEDULABLE_NODE_SELECTOR = {"kwok.tfk.test/no-such-node": "true"}


class ControlPlaneError(RuntimeError):
    pass


# --------------------------------------------------------------------------- build


def ensure_built() -> Path:
    """Build (or find in the cache) the binaries; return the bin directory.

    Cheap when the cache is present (hashes a few files). The first call on a fresh
    machine downloads the Go modules and compiles: minutes, see build.sh. The build's
    progress goes to stderr; its last lines are in the error if it fails.
    """
    return run_build(BUILD_SCRIPT, "AIRFLOW_TFK_K8S_BIN", ControlPlaneError)


def run_build(script: Path, override_var: str, error: type[Exception]) -> Path:
    """Run a cached build script and return the path it prints last (or ``$override_var``).

    The script's progress streams to stderr as it comes; its last 60 lines go into the
    ``error`` raised when it fails or prints nothing.
    """
    override = os.environ.get(override_var)
    if override:
        return Path(override)
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors: collections.deque[str] = collections.deque(maxlen=60)
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        errors.append(line.rstrip("\n"))
        sys.stderr.write(line)
        sys.stderr.flush()
    out = proc.stdout.read().strip().splitlines()
    rc = proc.wait()
    if rc != 0 or not out:
        name = script.relative_to(HERE.parents[1])
        raise error(f"{name} failed (exit {rc}); last lines:\n" + "\n".join(errors))
    return Path(out[-1])


def wait_until(
    what: str,
    ok: Callable[[], object],
    limit: float,
    alive: Callable[[], None],
    logs: dict[str, Path],
    log_dir: Path,
    error: type[Exception],
) -> None:
    """Poll ``ok`` (its exceptions are retried) until it returns true, for ``limit`` s.

    ``alive`` runs before each try and raises when a process being waited for died. On
    time-out, ``error`` names what was awaited, the last exception, the log directory and
    the last lines of each of ``logs`` (process name -> log file)."""
    deadline = time.monotonic() + limit
    last: Exception | None = None
    while time.monotonic() < deadline:
        alive()
        try:
            if ok():
                return
        except Exception as e:  # retried until the deadline
            last = e
        time.sleep(0.2)
    tails = "\n".join(f"--- {name}:\n{tail(path)}" for name, path in logs.items())
    raise error(f"timed out waiting for {what} ({last!r}); logs in {log_dir}\n{tails}")


# --------------------------------------------------------------------------- PKI


def _write_pki(d: Path) -> None:
    """CA, apiserver serving cert, service-account signing key pair (cryptography)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def pem_key(key) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )

    usages = inspect.signature(x509.KeyUsage).parameters
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "airflow-tfk-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            # KeyUsage has no defaults: every flag but the three a signing CA needs is off.
            x509.KeyUsage(**{f: f in ("digital_signature", "key_cert_sign", "crl_sign") for f in usages}),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    srv_key = ec.generate_private_key(ec.SECP256R1())
    sans = [
        x509.DNSName(n)
        for n in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "10.96.0.1")]
    srv = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    (d / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "ca.key").write_bytes(pem_key(ca_key))
    (d / "apiserver.crt").write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    (d / "apiserver.key").write_bytes(pem_key(srv_key))
    (d / "sa.key").write_bytes(pem_key(sa_key))
    (d / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for f in ("ca.key", "apiserver.key", "sa.key"):
        os.chmod(d / f, 0o600)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_kubeconfig(
    path: Path, server: str, ca_file: Path, token: str, user: str = "user", namespace: str | None = None
) -> Path:
    """A token kubeconfig (JSON is valid YAML) with the CA embedded, so it is self-contained."""
    ca_data = base64.b64encode(Path(ca_file).read_bytes()).decode()
    ctx: dict[str, Any] = {"cluster": "tfk-test", "user": user}
    if namespace:
        ctx["namespace"] = namespace
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "tfk-test", "cluster": {"server": server, "certificate-authority-data": ca_data}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "tfk-test", "context": ctx}],
        "current-context": "tfk-test",
    }
    path.write_text(json.dumps(cfg, indent=2))
    os.chmod(path, 0o600)
    return path


# --------------------------------------------------------------------------- processes


@dataclass
class _Proc:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = None

    def start(self, env: dict[str, str]) -> None:
        fh = open(self.log, "ab")  # owned by the child
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        finally:
            fh.close()

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with {self.popen.returncode}; last log lines:\n{tail(self.log)}"
            )

    def stop(self, timeout: float = 15) -> None:
        p = self.popen
        if p is None or p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)


def _die_with_parent() -> None:
    """In the child: get SIGKILL when the test process dies, even by SIGKILL (Linux). Not
    SIGTERM: the apiserver's graceful shutdown hangs once etcd, which got it too, is gone."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


@dataclass
class ControlPlane:
    """A running control plane. Create with :meth:`start`; stop with :meth:`stop`."""

    workdir: Path
    bin_dir: Path
    server: str = ""
    admin_token: str = ""
    nodes: list[str] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    procs: list[_Proc] = field(default_factory=list)
    startup_seconds: float = 0.0

    # ---- paths, all under workdir
    pki: Path = field(init=False)
    logs: Path = field(init=False)
    ca_file: Path = field(init=False)
    kubeconfig: Path = field(init=False)  # admin (system:masters)

    def __post_init__(self) -> None:
        self.pki = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.ca_file = self.pki / "ca.crt"
        self.kubeconfig = self.workdir / "admin.kubeconfig"

    # ---- lifecycle
    @classmethod
    def start(
        cls,
        workdir: Path | str | None = None,
        *,
        nodes: int = 2,
        bin_dir: Path | None = None,
        timeout: float = 120,
        log=print,
        extra_args: dict[str, list[str]] | None = None,
    ) -> ControlPlane:
        """Start everything and wait until it is ready (about 10 s).

        ``extra_args`` appends flags per component (``etcd``, ``kube-apiserver``,
        ``kube-controller-manager``, ``kube-scheduler``, ``kwok``), e.g.
        ``{"kube-controller-manager": ["--kube-api-qps=200", "--kube-api-burst=400"]}``
        for a benchmark that makes the Job controller create hundreds of pods.
        """
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix="tfk-k8s-")
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        cp = cls(workdir=workdir, bin_dir=bin_dir or ensure_built())
        try:
            cp._start(nodes=nodes, timeout=timeout, log=log, extra_args=extra_args or {})
        except BaseException:
            cp.stop()
            raise
        return cp

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        # Reverse order: kwok, scheduler, controller-manager, apiserver, etcd.
        for p in reversed(self.procs):
            p.stop()

    def remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _start(self, *, nodes: int, timeout: float, log, extra_args: dict[str, list[str]]) -> None:
        t0 = time.monotonic()
        for d in (self.pki, self.logs, self.workdir / "etcd", self.workdir / "kwok-home"):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write_pki(self.pki)
        for name in ("etcd_client", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok"):
            self.ports[name] = _free_port()
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"

        tokens = {
            n: base64.b32encode(os.urandom(20)).decode().lower().rstrip("=")
            for n in ("admin", "kcm", "scheduler", "kwok")
        }
        self.admin_token = tokens["admin"]
        # token,user,uid,"groups"; bootstrap RBAC binds the two component users.
        (self.pki / "tokens.csv").write_text(
            "\n".join(
                [
                    f'{tokens["admin"]},tfk-admin,tfk-admin,"system:masters"',
                    f'{tokens["kcm"]},system:kube-controller-manager,kcm,""',
                    f'{tokens["scheduler"]},system:kube-scheduler,scheduler,""',
                    # KWOK plays every node's kubelet, so the Node authorizer's one-node rules do
                    # not fit it; it runs as a cluster admin.
                    f'{tokens["kwok"]},tfk-kwok,kwok,"system:masters"',
                ]
            )
            + "\n"
        )
        os.chmod(self.pki / "tokens.csv", 0o600)
        write_kubeconfig(self.kubeconfig, self.server, self.ca_file, tokens["admin"], "tfk-admin")
        kc = {
            n: write_kubeconfig(self.workdir / f"{n}.kubeconfig", self.server, self.ca_file, tokens[n], n)
            for n in ("kcm", "scheduler", "kwok")
        }

        cpbin = str(self.bin_dir / "controlplane")
        etcd_url = f"http://127.0.0.1:{self.ports['etcd_client']}"
        self.procs = [
            _Proc(
                "etcd",
                [
                    cpbin,
                    "etcd",
                    f"--data-dir={self.workdir / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--listen-peer-urls=http://127.0.0.1:{self.ports['etcd_peer']}",
                ],
                self.logs / "etcd.log",
            ),
            _Proc(
                "kube-apiserver",
                [
                    cpbin,
                    "kube-apiserver",
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={self.ports['apiserver']}",
                    f"--cert-dir={self.pki}",
                    f"--tls-cert-file={self.pki / 'apiserver.crt'}",
                    f"--tls-private-key-file={self.pki / 'apiserver.key'}",
                    f"--client-ca-file={self.pki / 'ca.crt'}",
                    f"--token-auth-file={self.pki / 'tokens.csv'}",
                    "--anonymous-auth=false",
                    "--authorization-mode=Node,RBAC",
                    f"--service-account-key-file={self.pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={self.pki / 'sa.key'}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    # The `kubernetes` Service cannot point at a loopback address; nothing in
                    # the tests runs inside a pod, so do not reconcile its endpoints at all.
                    "--endpoint-reconciler-type=none",
                    # Front-proxy (aggregation) client CA, as kubeadm sets it: the components'
                    # delegated authentication reads it from extension-apiserver-authentication.
                    f"--requestheader-client-ca-file={self.pki / 'ca.crt'}",
                    "--requestheader-allowed-names=front-proxy-client",
                    "--requestheader-username-headers=X-Remote-User",
                    "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    "--allow-privileged=true",
                    # native gang scheduling: PodGroup is a beta API, served only when asked for
                    WORKLOAD_GATE,
                    "--runtime-config=scheduling.k8s.io/v1beta1=true",
                    "--profiling=false",
                    "--v=1",
                ],
                self.logs / "kube-apiserver.log",
            ),
            _Proc(
                "kube-controller-manager",
                [
                    cpbin,
                    "kube-controller-manager",
                    f"--kubeconfig={kc['kcm']}",
                    f"--authentication-kubeconfig={kc['kcm']}",
                    f"--authorization-kubeconfig={kc['kcm']}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={self.ports['kcm']}",
                    f"--cert-dir={self.pki / 'kcm'}",
                    "--leader-elect=false",
                    "--use-service-account-credentials=true",
                    f"--service-account-private-key-file={self.pki / 'sa.key'}",
                    f"--root-ca-file={self.pki / 'ca.crt'}",
                    f"--cluster-signing-cert-file={self.pki / 'ca.crt'}",
                    f"--cluster-signing-key-file={self.pki / 'ca.key'}",
                    "--controllers=*",
                    WORKLOAD_GATE,
                    "--profiling=false",
                    "--v=1",
                ],
                self.logs / "kube-controller-manager.log",
            ),
            _Proc(
                "kube-scheduler",
                [
                    cpbin,
                    "kube-scheduler",
                    f"--kubeconfig={kc['scheduler']}",
                    f"--authentication-kubeconfig={kc['scheduler']}",
                    f"--authorization-kubeconfig={kc['scheduler']}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={self.ports['scheduler']}",
                    f"--cert-dir={self.pki / 'scheduler'}",
                    "--leader-elect=false",
                    WORKLOAD_GATE,
                    "--profiling=false",
                    "--v=1",
                ],
                self.logs / "kube-scheduler.log",
            ),
            _Proc(
                "kwok",
                [
                    str(self.bin_dir / "kwok"),
                    f"--kubeconfig={kc['kwok']}",
                    f"--config={STAGES}",
                    f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                    f"--server-address=127.0.0.1:{self.ports['kwok']}",
                    "--node-lease-duration-seconds=40",
                    "--cidr=10.244.0.1/16",
                ],
                self.logs / "kwok.log",
            ),
        ]
        unknown = set(extra_args) - {p.name for p in self.procs}
        if unknown:
            raise ValueError(f"extra_args for unknown components: {sorted(unknown)}")
        for p in self.procs:
            p.argv += extra_args.get(p.name, [])
        env = dict(os.environ)
        env["HOME"] = str(self.workdir / "kwok-home")  # kwok writes ~/.kwok
        env.pop("KUBECONFIG", None)

        def wait(what: str, ok, procs: list[_Proc], limit: float) -> None:
            def alive() -> None:
                for p in procs:
                    p.check_alive()

            wait_until(what, ok, limit, alive, {p.name: p.log for p in procs}, self.logs, ControlPlaneError)

        by = {p.name: p for p in self.procs}
        by["etcd"].start(env)
        wait("etcd", lambda: _http_ok(f"{etcd_url}/health"), [by["etcd"]], timeout)
        by["kube-apiserver"].start(env)
        wait(
            "kube-apiserver /readyz",
            lambda: self._api_ok("/readyz"),
            [by["etcd"], by["kube-apiserver"]],
            timeout,
        )
        for n in ("kube-controller-manager", "kube-scheduler", "kwok"):
            by[n].start(env)
        wait(
            "kube-controller-manager /healthz",
            lambda: _http_ok(f"https://127.0.0.1:{self.ports['kcm']}/healthz", insecure=True),
            self.procs,
            timeout,
        )
        wait(
            "kube-scheduler /healthz",
            lambda: _http_ok(f"https://127.0.0.1:{self.ports['scheduler']}/healthz", insecure=True),
            self.procs,
            timeout,
        )
        wait(
            "kwok /healthz",
            lambda: _http_ok(f"http://127.0.0.1:{self.ports['kwok']}/healthz"),
            self.procs,
            timeout,
        )

        for i in range(nodes):
            self.add_node(f"kwok-node-{i}")
        wait("nodes Ready", self._nodes_ready, self.procs, timeout)
        # The service-account controller has run: pods can be admitted in new namespaces.
        wait(
            "default ServiceAccount",
            lambda: self._api_ok("/api/v1/namespaces/default/serviceaccounts/default"),
            self.procs,
            timeout,
        )
        self.startup_seconds = time.monotonic() - t0
        log(
            f"k8s control plane ready in {self.startup_seconds:.1f}s: {self.server} "
            f"(kubeconfig {self.kubeconfig}, logs {self.logs})"
        )

    def check_alive(self) -> None:
        for p in self.procs:
            p.check_alive()

    # ---- API helpers
    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        content_type: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token or self.admin_token}")
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, context=self._ssl_context(), timeout=10) as r:
            raw = r.read()
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode()

    def _api_ok(self, path: str) -> bool:
        try:
            self._request("GET", path)
            return True
        except (urllib.error.URLError, OSError):
            return False

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        capacity: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> None:
        """Register a KWOK-managed fake node (it turns Ready within a moment)."""
        lbl = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        lbl.update(labels or {})
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": lbl,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"taints": taints or []},
        }
        if capacity:
            node["status"] = {"capacity": capacity, "allocatable": capacity}
        self._request("POST", "/api/v1/nodes", node)
        self.nodes.append(name)

    def _nodes_ready(self) -> bool:
        items = self._request("GET", "/api/v1/nodes")["items"]
        ready = {
            n["metadata"]["name"]
            for n in items
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        }
        return set(self.nodes) <= ready

    def api_client(self, token: str | None = None):
        """A ``kubernetes.client.ApiClient`` (cluster-admin unless a token is given)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.api_key = {"authorization": f"Bearer {token or self.admin_token}"}
        return client.ApiClient(cfg)

    def kubeconfig_for_token(
        self, path: Path, token: str, user: str = "user", namespace: str | None = None
    ) -> Path:
        """A kubeconfig for another identity, e.g. a ServiceAccount token."""
        return write_kubeconfig(Path(path), self.server, self.ca_file, token, user, namespace)

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A bound token for an existing ServiceAccount (TokenRequest API)."""
        r = self._request(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        return r["status"]["token"]


def _http_ok(url: str, insecure: bool = False) -> bool:
    ctx = None
    if url.startswith("https"):
        ctx = ssl.create_default_context()
        if insecure:  # component self-signed serving certs, health endpoint only
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False
