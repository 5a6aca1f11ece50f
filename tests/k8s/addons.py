"""The JobSet, Kueue and Gateway APIs (their CustomResourceDefinitions) for the integration
tests.

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

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: module, version, CRD files inside the module
JOBSET = ("sigs.k8s.io/jobset", "v0.12.0", ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",))
#: the Gateway API's HTTPRoute (standard channel), for the serving spec's ``http_route``
GATEWAY_API = (
    "sigs.k8s.io/gateway-api",
    "v1.6.0",
    ("config/crd/standard/gateway.networking.k8s.io_httproutes.yaml",),
)
#: Kubeflow training-operator v1.9 (TFJob), for bench/bench_vs_tfjob.py only
TRAINING_OPERATOR = (
    "github.com/kubeflow/training-operator",
    "v1.9.3",
    ("manifests/base/crds/kubeflow.org_tfjobs.yaml",),
)
#: every Kueue CRD: its controller watches them all (cohorts, topologies, admission checks...)
KUEUE = (
    "sigs.k8s.io/kueue",
    "v0.19.2",
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


@contextlib.contextmanager
def _unless_status(status: int) -> Iterator[None]:
    """An API error with this HTTP status is expected (e.g. 404 on a delete): ignore it."""
    from kubernetes import client

    try:
        yield
    except client.ApiException as exc:
        if exc.status != status:
            raise


def install(api: Any, addon: tuple[str, str, tuple[str, ...]], timeout: float = 60) -> list[str]:
    """Create the add-on's CRDs (those not there yet) and wait until they are served.
    Returns their names. CRDs live as long as the (throw-away) control plane."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    names = []
    for crd in crds(addon):
        name = crd["metadata"]["name"]
        names.append(name)
        with _unless_status(409):  # installed by an earlier session on this control plane
            ext.create_custom_resource_definition(crd)
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
TFJOB_BUILD = HERE / "tfjob" / "build.sh"


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


def training_operator_binary() -> Path:
    return _build(TFJOB_BUILD)


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

    def _runtime_config(self, api_version: str, **extra: Any) -> list[str]:
        """The controller's binary with a controller-runtime Configuration file (written
        into the workdir) of what this harness sets for every add-on: certificates of our
        own, no leader election, the webhook on 127.0.0.1, metrics off, health on the
        chosen port; plus ``extra`` top-level keys."""
        import yaml

        config = {
            "apiVersion": api_version,
            "kind": "Configuration",
            "internalCertManagement": {"enable": False},
            "leaderElection": {"leaderElect": False},
            "webhook": {"port": self.port, "host": "127.0.0.1", "certDir": str(self.certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health}"},
            **extra,
        }
        path = self.workdir / f"{self.name}-config.yaml"
        path.write_text(yaml.safe_dump(config))
        return [str(self.binary), f"--config={path}", f"--kubeconfig={self.cp.kubeconfig}"]

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
        env = {**os.environ, "KUBECONFIG": str(self.cp.kubeconfig)}
        return self._launch(api, env, timeout, then=self._register_webhooks)

    def _launch(self, api: Any, env: dict[str, str], timeout: float, then: Callable[[Any], None]) -> Any:
        """Start the controller (output to its log), wait until it is ready, then
        ``then(api)``; if any of that fails, stop it again."""
        log = open(self.log_path, "wb")  # lives with the process
        self.proc = subprocess.Popen(
            self.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        try:
            self._wait_ready(timeout)
            then(api)
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
            with _unless_status(404):
                if kind == "MutatingWebhookConfiguration":
                    reg.delete_mutating_webhook_configuration(name)
                else:
                    reg.delete_validating_webhook_configuration(name)
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
        return [
            *self._runtime_config("config.jobset.x-k8s.io/v1alpha1"),
            f"--health-probe-bind-address=127.0.0.1:{self.health}",
            "--metrics-bind-address=0",
        ]

    def webhook(self, hook: dict[str, Any]) -> dict[str, Any] | None:
        if "pod" in hook["name"]:
            hook["objectSelector"] = {
                "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
            }
        return hook


#: sh -c script: argv workdir certdir target subdir command...; runs command in a private
#: mount namespace where ``target/subdir`` holds certdir's tls.crt/tls.key: ``target`` is
#: overlaid by a tmpfs (reads fall through to the host's directory, writes stay in the
#: tmpfs), so a controller that insists on a fixed certificate path gets one without
#: touching the host's files, and the mounts go away with the process.
_OVERLAY = """set -e
w="$1/overlay"; certs="$2"; target="$3"; sub="$4"; shift 4
mkdir -p "$w"
mount -t tmpfs tfk-overlay "$w"
mkdir -p "$w/upper/$sub" "$w/work"
cp "$certs/tls.crt" "$certs/tls.key" "$w/upper/$sub/"
mount -t overlay tfk-overlay -o "lowerdir=$target,upperdir=$w/upper,workdir=$w/work" "$target"
exec "$@"
"""


def _with_certs_at(workdir: Path, certs: Path, target: str, sub: str, argv: list[str]) -> list[str]:
    """``argv`` run with ``target/sub/tls.{crt,key}`` from ``certs`` (see _OVERLAY)."""
    wrapper = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _OVERLAY, "sh"]
    return [*wrapper, str(workdir), str(certs), target, sub, *argv]


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
        kueue = self._runtime_config(
            "config.kueue.x-k8s.io/v1beta2",
            namespace="kueue-system",
            manageJobsWithoutQueueName=False,
            integrations={"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
            featureGates={"VisibilityOnDemand": False},
        )
        kueue.append("--zap-log-level=2")
        # Without internal cert management Kueue reads its metrics server's certificate
        # from the fixed path /etc/kueue/metrics/certs (main.go), even with metrics off.
        # It gets one there in a private mount namespace of its own (see _OVERLAY).
        return _with_certs_at(self.workdir, self.certs, "/etc", "kueue/metrics/certs", kueue)

    def webhook(self, hook: dict[str, Any]) -> dict[str, Any] | None:
        kind = hook["name"].split(".", 1)[0][1:]  # "mjob.kb.io" -> "job"
        if kind in self._OWN:
            return hook
        if kind in self._FRAMEWORK_HOOKS:
            hook["objectSelector"] = {"matchExpressions": [{"key": KUEUE_QUEUE_LABEL, "operator": "Exists"}]}
            return hook
        return None


class TrainingOperatorController(_Controller):
    """Kubeflow training-operator v1.9 (``cmd/training-operator.v1``) with only the TFJob
    scheme and no gang scheduler, for the side-by-side benchmark (no test needs it).

    v1.9 cannot run without its webhook: ``main.go`` always starts the certificate
    rotator (open-policy-agent/cert-controller) and starts the controllers only once the
    rotator has found a valid certificate in its Secret, the files in the fixed directory
    ``/tmp/k8s-webhook-server/serving-certs`` (where a Deployment mounts the Secret) and
    its CA injected into the ``validator.training-operator.kubeflow.org`` webhook
    configuration. So it gets all three: a CA and a serving certificate of our own (valid
    for the rotator's DNS name *and* 127.0.0.1, so the rotator keeps them and the API
    server can call the webhook by URL), the Secret, the files in a private mount
    namespace (see _OVERLAY), and the module's TFJob validating webhook pointed at
    127.0.0.1. Its webhook server binds every interface (v1.9 has no host flag) on a free
    port. ``namespace`` holds the Secret (the operator's "own" namespace)."""

    name = "training-operator"
    addon = TRAINING_OPERATOR
    _CONFIG = "validator.training-operator.kubeflow.org"  # fixed in main.go
    _SECRET = "training-operator-webhook-cert"
    _SERVICE = "training-operator"

    def __init__(self, cp: Any, workdir: Path, binary: Path, namespace: str, qps: int = 20) -> None:
        super().__init__(cp, workdir, binary)
        self.namespace, self.qps = namespace, qps

    def argv(self) -> list[str]:
        operator = [
            str(self.binary),
            f"--kubeconfig={self.cp.kubeconfig}",
            "--enable-scheme=tfjob",
            f"--webhook-server-port={self.port}",
            f"--webhook-service-name={self._SERVICE}",
            f"--webhook-secret-name={self._SECRET}",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{self.health}",
            f"--kube-api-qps={self.qps}",
            f"--kube-api-burst={int(self.qps * 1.5)}",
        ]
        return _with_certs_at(self.workdir, self.certs, "/tmp", "k8s-webhook-server/serving-certs", operator)

    def start(self, api: Any, timeout: float = 120) -> Any:
        import base64

        from kubernetes import client

        install(api, self.addon)
        ca_crt, tls_crt, tls_key = self._certificates()
        data = {"ca.crt": ca_crt, "tls.crt": tls_crt, "tls.key": tls_key}
        data["ca.key"] = (self.certs / "ca.key").read_bytes()
        client.CoreV1Api(api).create_namespaced_secret(
            self.namespace,
            {
                "metadata": {"name": self._SECRET},
                "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
            },
        )
        self._register_webhooks(api)
        env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}  # the fixed cert dir is /tmp
        env["MY_POD_NAMESPACE"] = self.namespace
        return self._launch(api, env, timeout, then=self._check_webhook)

    def _check_webhook(self, api: Any) -> None:
        """The API server reaches the webhook: a TFJob without a ``tensorflow`` container
        (server-side dry run) is refused with the validator's own message."""
        from kubernetes import client

        container = {"name": "not-tensorflow", "image": "registry.invalid/x:1"}
        body = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": "webhook-check"},
            "spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [container]}}}}},
        }
        try:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "kubeflow.org", "v1", self.namespace, "tfjobs", body, dry_run="All"
            )
        except client.ApiException as exc:
            if "must have at least one container with name tensorflow" in str(exc.body):
                return
            raise AddonError(
                f"the TFJob webhook did not answer as expected: {exc.status} {exc.body}"
            ) from exc
        raise AddonError("a TFJob without a tensorflow container was accepted: the webhook is not called")

    def _certificates(self) -> tuple[bytes, bytes, bytes]:
        """A CA the rotator accepts as its own (it verifies the CA against the name
        ``training-operator-ca``) and a serving certificate for the rotator's DNS name and
        127.0.0.1. RSA: the rotator reads the CA key as PKCS#1. Ten years: the rotator
        replaces certificates that expire within its look-ahead (90 days)."""
        import datetime as dt
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = dt.datetime.now(dt.UTC)
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "training-operator-ca")])
        ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

        def issue(subject: x509.Name, key: Any, sans: list[x509.GeneralName], *extensions: Any) -> Any:
            builder = x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
            builder = builder.public_key(key.public_key()).serial_number(x509.random_serial_number())
            builder = builder.not_valid_before(now - dt.timedelta(minutes=5))
            builder = builder.not_valid_after(now + dt.timedelta(days=3650))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            for ext, critical in extensions:
                builder = builder.add_extension(ext, critical=critical)
            return builder.sign(ca_key, hashes.SHA256())

        ca = issue(
            ca_name,
            ca_key,
            [x509.DNSName("training-operator-ca")],
            (x509.BasicConstraints(ca=True, path_length=None), True),
        )
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        crt = issue(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self._SERVICE)]),
            key,
            [
                x509.DNSName(f"{self._SERVICE}.{self.namespace}.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ],
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        )
        pem = serialization.Encoding.PEM
        private = (pem, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
        files = {
            "ca.crt": ca.public_bytes(pem),
            "ca.key": ca_key.private_bytes(*private),
            "tls.crt": crt.public_bytes(pem),
            "tls.key": key.private_bytes(*private),
        }
        self.certs.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (self.certs / name).write_bytes(content)
        return files["ca.crt"], files["tls.crt"], files["tls.key"]

    def _register_webhooks(self, api: Any) -> None:
        """The module's TFJob validating webhook, by URL, in the configuration the rotator
        injects its CA into (main.go's fixed name; the module's kustomize patch renames
        the generated one to it)."""
        import base64

        import yaml
        from kubernetes import client

        root = module_dir(*self.addon[:2])
        docs = yaml.safe_load_all((root / "manifests/base/webhook/manifests.yaml").read_text())
        ca = base64.b64encode((self.certs / "ca.crt").read_bytes()).decode()
        hooks = []
        for doc in (d for d in docs if d):
            for hook in doc["webhooks"]:
                if hook["name"].startswith("validator.tfjob."):
                    path = hook["clientConfig"]["service"]["path"]
                    hook["clientConfig"] = {"url": f"https://127.0.0.1:{self.port}{path}", "caBundle": ca}
                    hooks.append(hook)
        if not hooks:
            raise AddonError("no TFJob webhook in the training-operator module's manifests")
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self._CONFIG},
            "webhooks": hooks,
        }
        client.AdmissionregistrationV1Api(api).create_validating_webhook_configuration(body)
        self.webhooks.append(("ValidatingWebhookConfiguration", self._CONFIG))
