"""A TEST DOUBLE of the parts of Kubernetes that serving touches (NOT Kubernetes).

Extends the HTTP API-server double of ``tests/backends/k8s_double.py`` with:

- the service proxy (``/api/v1/namespaces/NS/services/NAME:PORT/proxy/...``), forwarded to
  a local model server that plays the TF Serving pod behind the Service (503 while the
  Service has no Deployment, 404 without the Service, like the real proxy);
- a "kubelet" that copies the TF Serving ConfigMap into that model server's config file
  (the ConfigMap volume), with ``/tfk/models`` mapped to a local model store (the PVC);
- a "kubelet" that runs the store-reader Job's command locally on that store, sets the
  pod's log and marks it Succeeded or Failed.
"""

from __future__ import annotations

import re
import subprocess
import threading
import urllib.error
import urllib.request
from typing import Any

from airflow_tfk.core import processes as _process
from tests.backends.k8s_double import KubeApiDouble, _Handler, _status

_PROXY = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)/services/(?P<svc>[^/:]+)(?::(?P<port>[^/]+))?"
    r"/proxy(?P<rest>/.*)?$"
)


class ServingApiDouble(KubeApiDouble):
    def __init__(self, store: str) -> None:
        super().__init__()
        self.store = store.rstrip("/")
        self.pods: dict[tuple[str, str], Any] = {}  # (ns, service) -> LocalServing "pod"
        self.proxied: list[str] = []

    def start(self) -> ServingApiDouble:
        # Where the API server lives, as a real one publishes it: the serving
        # NetworkPolicy admits its service proxy from these addresses.
        self._put(
            "endpointslices",
            "default",
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["127.0.0.1"]}],
            },
            emit=False,
        )
        super().start()
        return self

    def _handler(self) -> type[_Handler]:
        return _ProxyHandler

    def local_path(self, pod_path: str) -> str:
        return re.sub(r"^/tfk/models(?=/|$)", self.store, pod_path)

    def _apply(self, plural, ns, name, query, body):  # the parent's signature
        code, obj = super()._apply(plural, ns, name, query, body)
        labels = (body.get("metadata") or {}).get("labels") or {}
        if code in (200, 201) and plural == "configmaps" and "tfk.airflow.apache.org/serving" in labels:
            pod = self.pods.get((ns, labels["tfk.airflow.apache.org/serving"]))
            if pod is not None:
                text = (body.get("data") or {}).get("models.config", "")
                text = re.sub(r'base_path: "/tfk/models(?=[/"])', f'base_path: "{self.store}', text)
                pod.dir.mkdir(parents=True, exist_ok=True)
                _process.write_atomic(pod.config_path, text)
        if code == 201 and plural == "jobs" and labels.get("app.kubernetes.io/component") == "store-reader":
            threading.Thread(target=self._run_reader, args=(ns, name, body), daemon=True).start()
        return code, obj

    def _run_reader(self, ns: str, job: str, body: dict[str, Any]) -> None:
        container = body["spec"]["template"]["spec"]["containers"][0]
        argv = [a.replace("$$", "$") for a in container["command"]]
        argv[4] = self.local_path(argv[4])  # the model dir on the PVC
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        pod = next(p for p in self.list("pods", f"batch.kubernetes.io/job-name={job}", ns))
        name = pod["metadata"]["name"]
        self.set_log(name, out.stdout + out.stderr, ns)
        if out.returncode == 0:
            self.set_succeeded(name, ns)
        else:
            self.set_failed(name, out.returncode, namespace=ns)


class _ProxyHandler(_Handler):
    api: ServingApiDouble

    def _handle(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        m = _PROXY.match(path)
        if not m:
            return super()._handle(method)
        api = self.api
        body = self._body() if method in ("POST", "PUT", "PATCH") else None
        ns, svc = m.group("ns"), m.group("svc")
        with api.lock:
            api.proxied.append(f"{method} {path}")
            has_svc = ("services", ns, svc) in api.objects
            has_deploy = ("deployments", ns, svc) in api.objects
        pod = api.pods.get((ns, svc))
        if not has_svc:
            return self._send(404, _status(404, "NotFound", f'services "{svc}" not found'))
        if not has_deploy or pod is None or not pod.running():
            return self._send(
                503, _status(503, "ServiceUnavailable", f'no endpoints available for service "{svc}"')
            )
        req = urllib.request.Request(
            pod.url + (m.group("rest") or "/"),
            data=body,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                status, data = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, data = exc.code, exc.read()
        return self._send(status, data.decode())
