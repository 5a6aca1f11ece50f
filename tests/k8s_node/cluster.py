"""Several real Kubernetes nodes on one control plane (no pytest dependency).

Layout (every namespace private to one session, as for the single node of node.py):

- a *fabric* namespace (net + mount + PID, a holder like a node's): the bridge ``tfkbr``
  with :data:`FABRIC_IP`, the control plane (its apiserver listening on every address of
  the namespace), CoreDNS on :data:`FABRIC_IP`, and the test process's forward to the
  apiserver. It plays the network between the machines of a cluster.
- per node, the namespaces of node.py: containerd, the kubelet, kube-proxy; its node IP on
  the veth ``tfk0``, whose peer is a port of ``tfkbr``; its pods on its own ``cni0`` bridge
  and subnet (``10.88.<n>.0/24``). Routes like a host-gateway network: each node reaches
  every other node's pod subnet through that node's IP, the fabric too (for CoreDNS's
  answers), and each node forwards between its pods and the fabric.
- kube-proxy per node (iptables mode, legacy iptables from Debian packages), so ClusterIP
  Services work, as on a real cluster. ``bridge-nf-call-iptables`` is on in each node's
  namespace: a reply from a pod behind a Service on the same bridge must pass the
  conntrack entry that translated the request.

Tear-down: the nodes' namespaces first (their PID 1 takes every process with it), then the
fabric's (the control plane, CoreDNS); the bridge and veths go with their namespaces.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import node as nodemod
from .node import Node, NodeError, harness

NODES_BUILD_SCRIPT = nodemod.REPO / "tests" / "k8s" / "nodes" / "build.sh"
POLICY_BUILD_SCRIPT = nodemod.REPO / "tests" / "k8s" / "nodes" / "kube-router" / "build.sh"
FABRIC_IP = "10.200.0.1"
#: Every node's pod subnet lies in here (kube-proxy's idea of "inside the cluster").
CLUSTER_CIDR = "10.88.0.0/16"
BRIDGE = "tfkbr"


def ensure_built() -> Path:
    """The directory of tests/k8s/nodes/build.sh: kube-proxy and iptables (cached)."""
    return harness.run_build(NODES_BUILD_SCRIPT, "AIRFLOW_TFK_K8S_NODES_DIR", NodeError)


def ensure_policy_built() -> Path:
    """kube-router's binary (tests/k8s/nodes/kube-router/build.sh, cached)."""
    return harness.run_build(POLICY_BUILD_SCRIPT, "AIRFLOW_TFK_K8S_KUBE_ROUTER", NodeError)


def node_name(i: int) -> str:
    return f"tfk-node-{i + 1}"


def _net(pid: int, argv: list[str]) -> None:
    """``argv`` in ``pid``'s network namespace only: the host's /proc stays visible, so
    ``ip link ... netns <pid>`` can name a node by its host PID."""
    r = subprocess.run(["nsenter", f"--target={pid}", "--net", "--", *argv], capture_output=True, text=True)
    if r.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")


@dataclass
class Cluster:
    """Control plane + ``count`` real nodes. :meth:`start`, then :meth:`stop` (always)."""

    workdir: Path
    fabric: Node
    nodes: list[Node] = field(default_factory=list)
    extra_dir: Path | None = None
    policy_bin: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)
    _tools: Path | None = None

    @property
    def cp(self) -> harness.ControlPlane:
        assert self.fabric.cp is not None
        return self.fabric.cp

    @property
    def kubeconfig(self) -> Path:
        return self.cp.kubeconfig

    @property
    def logs(self) -> Path:
        return self.workdir

    def api_client(self, token: str | None = None):
        return self.cp.api_client(token)

    @classmethod
    def start(
        cls,
        count: int = 2,
        workdir: Path | None = None,
        *,
        log=print,
        timeout: float = 180,
        kube_proxy: bool = True,
        policy: bool = False,
    ) -> Cluster:
        """``kube_proxy=False``: no Services but headless ones (and no build of
        tests/k8s/nodes), as on the single node. ``policy``: NetworkPolicies enforced by
        kube-router's policy controller on every node (needs kube-proxy's iptables)."""
        missing = nodemod.missing_prerequisites()
        if missing:
            raise NodeError("this machine lacks: " + "; ".join(missing))
        node_dir = nodemod.ensure_built()
        extra_dir = ensure_built() if kube_proxy or policy else None
        policy_bin = ensure_policy_built() if policy else None
        w = Path(workdir or tempfile.mkdtemp(prefix="tfk-nodes-"))
        fabric = Node(workdir=w / "fabric", node_dir=node_dir, name="fabric", ip=FABRIC_IP)
        cluster = cls(workdir=w, fabric=fabric, extra_dir=extra_dir if kube_proxy else None)
        cluster.policy_bin, cluster._tools = policy_bin, extra_dir
        try:
            cluster._start(count, log, timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _start(self, count: int, log, timeout: float) -> None:
        t0 = time.monotonic()
        f = self.fabric
        f.logs.mkdir(parents=True, exist_ok=True)
        f._start_namespaces(
            net_setup=[
                f"ip link add {BRIDGE} type bridge",
                f"ip addr add {FABRIC_IP}/24 dev {BRIDGE}",
                f"ip link set {BRIDGE} up",
                "echo 1 > /proc/sys/net/ipv4/ip_forward",
            ]
        )
        # Every address: the nodes dial the apiserver at FABRIC_IP.
        f._start_control_plane(api_args=["--bind-address=0.0.0.0"])
        f._start_coredns()
        self.timings["fabric+control plane"] = time.monotonic() - t0
        for i in range(count):
            n = Node(
                workdir=self.workdir / node_name(i),
                node_dir=f.node_dir,
                name=node_name(i),
                ip=f"10.200.0.{11 + i}",
                pod_subnet=f"10.88.{i + 1}.0/24",
                dns_ip=FABRIC_IP,
                api_host=FABRIC_IP,
                owns_cp=False,
            )
            n.cp, n._ns_port = f.cp, f._ns_port
            n.logs.mkdir(parents=True, exist_ok=True)
            self.nodes.append(n)
            n._start_namespaces(
                net_setup=[
                    "echo 1 > /proc/sys/net/ipv4/ip_forward",
                    "echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables",
                ]
            )
        self._wire()
        t1 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(len(self.nodes)) as pool:
            for fut in [pool.submit(self._start_node, n, timeout) for n in self.nodes]:
                fut.result()
        self.timings["nodes Ready"] = time.monotonic() - t1
        f._wait_coredns()
        self.timings["total"] = time.monotonic() - t0
        log(
            f"k8s cluster of {count} real nodes Ready in {self.timings['total']:.1f}s "
            + ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items() if k != "total")
            + f" (apiserver {self.cp.server}, logs {self.workdir})"
        )

    def _wire(self) -> None:
        """The veths into the fabric's bridge, and the routes between the pod subnets."""
        f = self.fabric
        for i, n in enumerate(self.nodes):
            port = f"v{i + 1}"
            _net(
                f.ns_pid,
                ["ip", "link", "add", port, "type", "veth", "peer", "name", "tfk0", "netns", str(n.ns_pid)],
            )
            _net(f.ns_pid, ["ip", "link", "set", port, "master", BRIDGE, "up"])
            _net(n.ns_pid, ["ip", "addr", "add", f"{n.ip}/24", "dev", "tfk0"])
            _net(n.ns_pid, ["ip", "link", "set", "tfk0", "up"])
            _net(f.ns_pid, ["ip", "route", "add", n.pod_subnet, "via", n.ip])
        for n in self.nodes:
            for other in self.nodes:
                if other is not n:
                    _net(n.ns_pid, ["ip", "route", "add", other.pod_subnet, "via", other.ip])

    def _start_node(self, n: Node, timeout: float) -> None:
        n._start_containerd()
        n._start_kubelet(timeout, coredns=False)
        if self.extra_dir is not None:
            self._start_kube_proxy(n)
        if self.policy_bin is not None:
            self._start_policy(n)

    def _admin_kubeconfig(self, n: Node, user: str) -> Path:
        """An admin kubeconfig that dials the apiserver across the fabric."""
        kc = n.workdir / f"{user}.kubeconfig"
        kc.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "tfk",
                            "cluster": {
                                "server": f"https://{FABRIC_IP}:{n._ns_port}",
                                "certificate-authority": str(self.cp.ca_file),
                                "tls-server-name": "kubernetes",
                            },
                        }
                    ],
                    "users": [{"name": user, "user": {"token": self.cp.admin_token}}],
                    "contexts": [{"name": "tfk", "context": {"cluster": "tfk", "user": user}}],
                    "current-context": "tfk",
                }
            )
        )
        return kc

    def _tools_env(self, n: Node) -> dict[str, str]:
        """iptables and ipset from the Debian packages of tests/k8s/nodes, first on PATH."""
        assert self._tools is not None
        env = n._env()
        env["PATH"] = f"{self._tools / 'bin'}:{env['PATH']}"
        env["LD_LIBRARY_PATH"] = str(self._tools / "lib")
        env["XTABLES_LIBDIR"] = str(self._tools / "xtables")
        return env

    def _start_kube_proxy(self, n: Node) -> None:
        t0 = time.monotonic()
        kc = self._admin_kubeconfig(n, "kube-proxy")
        cfg = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kc)},
            "mode": "iptables",
            "clusterCIDR": CLUSTER_CIDR,
            "hostnameOverride": n.name,
            "bindAddress": n.ip,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # NodePorts on the node IP only: no route_localnet, nothing on loopback.
            "nodePortAddresses": [f"{n.ip}/32"],
            # nf_conntrack_max is the host's (read-only in a child namespace): left alone.
            "conntrack": {"maxPerCore": 0, "min": 0},
            "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
        }
        (n.workdir / "kube-proxy.yaml").write_text(json.dumps(cfg))
        n._spawn(
            "kube-proxy",
            ["kube-proxy", f"--config={n.workdir / 'kube-proxy.yaml'}", "--v=1"],
            self._tools_env(n),
        )
        n._wait(
            "kube-proxy healthy",
            lambda: n._in_ns(harness._http_ok, "http://127.0.0.1:10256/healthz"),
            60,
            ["kube-proxy"],
        )
        n.timings["kube-proxy"] = time.monotonic() - t0

    def _start_policy(self, n: Node) -> None:
        """kube-router's network-policy controller alone (no routing, no service proxy, no
        CNI): iptables chains per pod and ipsets of the pods each policy selects."""
        assert self.policy_bin is not None
        t0 = time.monotonic()
        kc = self._admin_kubeconfig(n, "kube-router")
        n._spawn(
            "kube-router",
            [
                str(self.policy_bin),
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--enable-cni=false",
                f"--kubeconfig={kc}",
                f"--hostname-override={n.name}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--health-port=20244",
                "--iptables-sync-period=10s",
                "--v=1",
            ],
            self._tools_env(n),
        )
        n._wait(
            "kube-router healthy",
            lambda: n._in_ns(harness._http_ok, "http://127.0.0.1:20244/healthz"),
            60,
            ["kube-router"],
        )
        n.timings["kube-router"] = time.monotonic() - t0

    def proxied_endpoints(self, n: Node, cluster_ip: str, port: int) -> int:
        """How many endpoints kube-proxy on ``n`` has written into its iptables rules for the
        Service at ``cluster_ip``:``port`` (its ``KUBE-SVC-*`` chain's ``KUBE-SEP-*`` jumps).
        A client that calls a Service sooner is refused (no endpoints yet) or reaches
        fewer of them than the EndpointSlice lists."""
        r = subprocess.run(
            ["nsenter", f"--target={n.ns_pid}", "--net", "--", "iptables-save", "-t", "nat"],
            env=self._tools_env(n),
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise NodeError(f"iptables-save on {n.name} failed ({r.returncode}): {r.stderr.strip()}")
        rules = r.stdout.splitlines()
        service = f"-d {cluster_ip}/32 "
        chains = {
            line.rsplit("-j ", 1)[1].strip()
            for line in rules
            if line.startswith("-A KUBE-SERVICES ") and service in line and f"--dport {port} " in line
        }
        return sum(
            1 for line in rules for c in chains if line.startswith(f"-A {c} ") and "-j KUBE-SEP-" in line
        )

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
        self.fabric.stop()

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)

    def leftovers(self, removed: bool = True) -> list[str]:
        out = []
        for n in [*self.nodes, self.fabric]:
            out += [f"{n.name}: {x}" for x in n.leftovers(removed=False)]
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        if f": {BRIDGE}:" in links or f": {BRIDGE}@" in links:
            out.append(f"network device {BRIDGE} on the host")
        if removed and self.workdir.exists():
            out.append(f"directory {self.workdir}")
        return out
