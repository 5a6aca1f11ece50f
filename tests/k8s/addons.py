"""The JobSet and Kueue APIs (their CustomResourceDefinitions) for the integration tests.

The CRDs come from the projects' own Go modules at pinned versions, fetched through the
Go module proxy into the Go module cache (``go mod download``: a few MB, once). Installing
them into the test control plane makes the real API server validate the provider's JobSets
against JobSet's published schema (strict server-side dry run), and store and serve
Kueue's Workloads. The controllers themselves are not run here (see docs/kueue.md): what
needs them (un-suspending, admission, JobSet's success policy) is not claimed by these
tests.
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
KUEUE = (
    "sigs.k8s.io/kueue",
    "v0.14.0",
    tuple(
        f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"
        for plural in ("workloads", "localqueues", "clusterqueues", "resourceflavors")
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


# -- the JobSet controller (tests/k8s/jobset/build.sh) ------------------------------------
JOBSET_BUILD = Path(__file__).resolve().parent / "jobset" / "build.sh"


def jobset_binary() -> Path:
    """Build (once, cached) the JobSet controller; its path."""
    proc = subprocess.run(["bash", str(JOBSET_BUILD)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise AddonError(f"tests/k8s/jobset/build.sh failed: {proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JobSetController:
    """The real JobSet controller (and its webhooks) as a local process beside the test
    control plane. Its webhook server listens on 127.0.0.1 with the API server's own
    serving certificate (valid for 127.0.0.1, signed by the cluster CA), and the webhook
    configurations of the JobSet module call it by URL instead of through a Service.
    The pod webhooks only select pods that carry JobSet's label, so other tests' pods are
    untouched; everything is removed again by :meth:`stop`."""

    def __init__(self, cp: Any, workdir: Path, binary: Path) -> None:
        self.cp, self.workdir, self.binary = cp, workdir, binary
        self.proc: subprocess.Popen[bytes] | None = None
        self.suffix = f"-tfk-{os.getpid()}"
        self.webhooks: list[tuple[str, str]] = []  # (kind, name)

    def start(self, api: Any, timeout: float = 120) -> JobSetController:
        import base64

        import yaml
        from kubernetes import client

        install(api, JOBSET)
        certs = self.workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.cp.pki / "apiserver.crt", certs / "tls.crt")
        shutil.copy(self.cp.pki / "apiserver.key", certs / "tls.key")
        port, health = _free_port(), _free_port()
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "internalCertManagement": {"enable": False},
            "leaderElection": {"leaderElect": False},
            "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
        }
        cfg = self.workdir / "jobset-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        log = open(self.workdir / "jobset.log", "wb")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(
            [
                str(self.binary),
                f"--config={cfg}",
                f"--kubeconfig={self.cp.kubeconfig}",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                "--metrics-bind-address=0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready(health, timeout)

        root = module_dir(*JOBSET[:2])
        docs = [
            d
            for d in yaml.safe_load_all((root / "config/components/webhook/manifests.yaml").read_text())
            if d
        ]
        ca = base64.b64encode((self.cp.pki / "ca.crt").read_bytes()).decode()
        reg = client.AdmissionregistrationV1Api(api)
        for doc in docs:
            doc["metadata"]["name"] = "jobset-" + doc["metadata"]["name"] + self.suffix
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
                if "pod" in hook["name"]:  # as the module's kustomize patches do
                    hook["objectSelector"] = {
                        "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
                    }
            if doc["kind"] == "MutatingWebhookConfiguration":
                reg.create_mutating_webhook_configuration(doc)
            else:
                reg.create_validating_webhook_configuration(doc)
            self.webhooks.append((doc["kind"], doc["metadata"]["name"]))
        return self

    def _wait_ready(self, health: int, timeout: float) -> None:
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AddonError(
                    f"the JobSet controller exited: {(self.workdir / 'jobset.log').read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AddonError(f"the JobSet controller is not ready after {timeout}s")

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
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
