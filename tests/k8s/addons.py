"""The JobSet and Kueue APIs (their CustomResourceDefinitions) for the integration tests.

The CRDs come from the projects' own Go modules at pinned versions, fetched through the
Go module proxy into the Go module cache (``go mod download``: a few MB, once). Installing
them into the test control plane makes the real API server validate the provider's JobSets
against JobSet's published schema (strict server-side dry run), and store and serve
Kueue's Workloads.

The controllers themselves (:class:`JobSetController`, :class:`KueueController`) are built
from the same pinned modules by ``tests/k8s/jobset/build.sh`` and ``tests/k8s/kueue/build.sh``
(cached outside the repository) and run as local processes beside the test control plane.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

#: module, version, CRD files inside the module
JOBSET = ("sigs.k8s.io/jobset", "v0.11.0", ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",))
#: every Kueue CRD: its controller watches them all (cohorts, topologies, admission checks...)
KUEUE = (
    "sigs.k8s.io/kueue",
    "v0.14.0",
    tuple(
        f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"
        for plural in (
            "workloads",
            "localqueues",
            "clusterqueues",
            "resourceflavors",
            "admissionchecks",
            "cohorts",
            "multikueueclusters",
            "multikueueconfigs",
            "provisioningrequestconfigs",
            "topologies",
            "workloadpriorityclasses",
        )
    ),
)


class AddonError(RuntimeError):
    pass


def _go() -> str:
    for candidate in (os.environ.get("AIRFLOW_TFK_K8S_GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and Path(candidate).exists():
            return candidate
    raise AddonError("no Go toolchain to fetch the CRDs with (set AIRFLOW_TFK_K8S_GO)")


def module_dir(module: str, version: str) -> Path:
    """The module's source in the Go module cache (downloaded on first use)."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GO111MODULE": "on"}
    proc = subprocess.run(
        [_go(), "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.expanduser("~"),
        timeout=600,
    )
    if proc.returncode != 0:
        raise AddonError(
            f"go mod download {module}@{version} failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
        )
    return Path(json.loads(proc.stdout)["Dir"])


def crds(addon: tuple[str, str, tuple[str, ...]]) -> list[dict[str, Any]]:
    import yaml

    module, version, files = addon
    root = module_dir(module, version)
    return [yaml.safe_load((root / f).read_text()) for f in files]


def install(api: Any, addon: tuple[str, str, tuple[str, ...]], timeout: float = 60) -> list[str]:
    """Create the add-on's CRDs (those not there yet) and wait until they are served.
    Returns their names. CRDs live as long as the (throw-away) control plane."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    names = []
    for crd in crds(addon):
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            ext.create_custom_resource_definition(crd)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            conds = ext.read_custom_resource_definition(name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise AddonError(f"CRD {name} not established after {timeout}s")
            time.sleep(0.2)
    return names


# -- controllers built from their Go modules (tests/k8s/<addon>/build.sh) ------------------
HERE = Path(__file__).resolve().parent
JOBSET_BUILD = HERE / "jobset" / "build.sh"
KUEUE_BUILD = HERE / "kueue" / "build.sh"


def _build(script: Path) -> Path:
    """Build (once, cached) a controller; its path (the script's last line)."""
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise AddonError(f"{script.relative_to(HERE.parent)} failed: {proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def jobset_binary() -> Path:
    return _build(JOBSET_BUILD)


def kueue_binary() -> Path:
    return _build(KUEUE_BUILD)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Controller:
    """A controller-runtime manager (and its webhooks) as a local process beside the test
    control plane. Its webhook server listens on 127.0.0.1 with the API server's own
    serving certificate (valid for 127.0.0.1, signed by the cluster CA), and the module's
    webhook configurations call it by URL instead of through a Service. Subclasses pick
    which webhooks to register and narrow them (object selectors) so other tests' objects
    are untouched; everything is removed again by :meth:`stop`."""

    name = "controller"
    addon: tuple[str, str, tuple[str, ...]]

    def __init__(self, cp: Any, workdir: Path, binary: Path) -> None:
        self.cp, self.workdir, self.binary = cp, workdir, binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.suffix = f"-tfk-{os.getpid()}"
        self.webhooks: list[tuple[str, str]] = []  # (kind, name)
        self.port, self.health = _free_port(), _free_port()
        self.certs = workdir / "certs"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    # subclasses: the command line, and each webhook to register (None: leave it out)
    def argv(self) -> list[str]:
        raise NotImplementedError

    def webhook(self, hook: dict[str, Any]) -> dict[str, Any] | None:
        return hook

    def start(self, api: Any, timeout: float = 120) -> Any:
        install(api, self.addon)
        self.certs.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.cp.pki / "apiserver.crt", self.certs / "tls.crt")
        shutil.copy(self.cp.pki / "apiserver.key", self.certs / "tls.key")
        log = open(self.log_path, "wb")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            self.argv(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "KUBECONFIG": str(self.cp.kubeconfig)},
        )
        try:
            self._wait_ready(timeout)
            self._register_webhooks(api)
        except BaseException:
            self.stop(api)
            raise
        return self

    def _register_webhooks(self, api: Any) -> None:
        import base64

        import yaml
        from kubernetes import client

        root = module_dir(*self.addon[:2])
        manifests = (root / "config/components/webhook/manifests.yaml").read_text()
        ca = base64.b64encode((self.cp.pki / "ca.crt").read_bytes()).decode()
        reg = client.AdmissionregistrationV1Api(api)
        for doc in (d for d in yaml.safe_load_all(manifests) if d):
            hooks = []
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.port}{path}", "caBundle": ca}
                kept = self.webhook(hook)
                if kept is not None:
                    hooks.append(kept)
            if not hooks:
                continue
            doc["webhooks"] = hooks
            doc["metadata"]["name"] = f"{self.name}-{doc['metadata']['name']}{self.suffix}"
            if doc["kind"] == "MutatingWebhookConfiguration":
                reg.create_mutating_webhook_configuration(doc)
            else:
                reg.create_validating_webhook_configuration(doc)
            self.webhooks.append((doc["kind"], doc["metadata"]["name"]))

    def _wait_ready(self, timeout: float) -> None:
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AddonError(f"the {self.name} controller exited: {self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AddonError(f"the {self.name} controller is not ready after {timeout}s")

    def stop(self, api: Any) -> None:
        import signal

        from kubernetes import client

        reg = client.AdmissionregistrationV1Api(api)
        for kind, name in self.webhooks:
            try:
                if kind == "MutatingWebhookConfiguration":
                    reg.delete_mutating_webhook_configuration(name)
                else:
                    reg.delete_validating_webhook_configuration(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        self.webhooks = []
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class JobSetController(_Controller):
    """The real JobSet controller (sigs.k8s.io/jobset). Its pod webhooks only select pods
    that carry JobSet's label, as the module's kustomize patches do."""

    name = "jobset"
    addon = JOBSET

    def argv(self) -> list[str]:
        import yaml

        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "internalCertManagement": {"enable": False},
            "leaderElection": {"leaderElect": False},
            "webhook": {"port": self.port, "host": "127.0.0.1", "certDir": str(self.certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health}"},
        }
        cfg = self.workdir / "jobset-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        return [
            str(self.binary),
            f"--config={cfg}",
            f"--kubeconfig={self.cp.kubeconfig}",
            f"--health-probe-bind-address=127.0.0.1:{self.health}",
            "--metrics-bind-address=0",
        ]

    def webhook(self, hook: dict[str, Any]) -> dict[str, Any] | None:
        if "pod" in hook["name"]:
            hook["objectSelector"] = {
                "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
            }
        return hook


#: sh -c script: argv workdir certdir command...; runs command with /etc/kueue/metrics/certs
#: holding certdir's tls.crt/tls.key (see KueueController.argv)
_ETC_OVERLAY = """set -e
w="$1/etc-overlay"; certs="$2"; shift 2
mkdir -p "$w"
mount -t tmpfs tfk-kueue-etc "$w"
mkdir -p "$w/upper/kueue/metrics/certs" "$w/work"
cp "$certs/tls.crt" "$certs/tls.key" "$w/upper/kueue/metrics/certs/"
mount -t overlay tfk-kueue-etc -o "lowerdir=/etc,upperdir=$w/upper,workdir=$w/work" /etc
exec "$@"
"""

#: Kueue's queue label; only objects carrying it reach Kueue's Job/JobSet webhooks here
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class KueueController(_Controller):
    """The real Kueue controller (sigs.k8s.io/kueue, ``cmd/kueue``) with the ``batch/job``
    and ``jobset.x-k8s.io/jobset`` integrations. Needs JobSet's CRD installed first
    (Kueue sets up an integration only if its API is served).

    Registered webhooks: Kueue's own objects (ClusterQueue, ResourceFlavor, Cohort,
    Workload) and the Job and JobSet ones, narrowed to objects that carry the queue label;
    the other frameworks' webhooks are left out. ``manageJobsWithoutQueueName`` stays off,
    so Jobs of other tests are ignored. The visibility API server (an aggregated API server
    on a fixed port) is switched off; nothing here uses it."""

    name = "kueue"
    addon = KUEUE
    _OWN = ("clusterqueue", "resourceflavor", "cohort", "workload")
    _FRAMEWORK_HOOKS = ("job", "jobset")

    def argv(self) -> list[str]:
        import yaml

        config = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta1",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "internalCertManagement": {"enable": False},
            "leaderElection": {"leaderElect": False},
            "webhook": {"port": self.port, "host": "127.0.0.1", "certDir": str(self.certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health}"},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
            "featureGates": {"VisibilityOnDemand": False},
        }
        cfg = self.workdir / "kueue-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        kueue = [
            str(self.binary),
            f"--config={cfg}",
            f"--kubeconfig={self.cp.kubeconfig}",
            "--zap-log-level=2",
        ]
        # Without internal cert management Kueue reads its metrics server's certificate
        # from the fixed path /etc/kueue/metrics/certs (main.go), even with metrics off.
        # It gets one there in a private mount namespace of its own: /etc overlaid by a
        # tmpfs holding that directory. The host's /etc is untouched, and the mounts go
        # away with the process.
        wrapper = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _ETC_OVERLAY, "sh"]
        return [*wrapper, str(self.workdir), str(self.certs), *kueue]

    def webhook(self, hook: dict[str, Any]) -> dict[str, Any] | None:
        kind = hook["name"].split(".", 1)[0][1:]  # "mjob.kb.io" -> "job"
        if kind in self._OWN:
            return hook
        if kind in self._FRAMEWORK_HOOKS:
            hook["objectSelector"] = {"matchExpressions": [{"key": KUEUE_QUEUE_LABEL, "operator": "Exists"}]}
            return hook
        return None
