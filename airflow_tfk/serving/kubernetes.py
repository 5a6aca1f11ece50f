"""TF Serving on Kubernetes: a Deployment, a Service and a model-config ConfigMap per
model, applied with server-side apply through the cncf ``KubernetesHook``; status and
``:predict`` reached through the API server's service proxy
(``/api/v1/namespaces/NS/services/NAME:PORT/proxy/v1/models/...``), so no ingress is
needed. The provider cannot read the models PVC itself: a short Job with the serving image
prints the exported versions and the sample request, and the provider reads its log.

Imports the Kubernetes client and the cncf provider lazily.
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any

from airflow_tfk.kube.api import BY_KIND, LOG_LIMIT_BYTES, Call, error_message, is_not_found
from airflow_tfk.kube.retry import api_status
from airflow_tfk.kube.target import KubeTarget
from airflow_tfk.protocol.digits import model_version
from airflow_tfk.protocol.model_config import ModelServerConfig, parse
from airflow_tfk.serving._http import answer
from airflow_tfk.serving._pods import PodHealth, is_ready, is_running
from airflow_tfk.serving.base import (
    Emit,
    PredictError,
    ServingError,
    ServingTarget,
    VersionState,
    parse_status,
)
from airflow_tfk.serving.files import MAX_STORE_JSON
from airflow_tfk.serving.spec import CONFIG_FILE, PUBLISHED_METRICS, ServingSpec

log = logging.getLogger(__name__)


def service_proxy_path(namespace: str, service: str, port: int, path: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy{path}"


def pod_proxy_path(namespace: str, pod: str, port: int, path: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy{path}"


#: what the spec may or may not ask for; applied when asked, removed when no longer asked
OPTIONAL_KINDS = ("HTTPRoute", "Ingress", "HorizontalPodAutoscaler", "PodDisruptionBudget")
GATEWAY_API = "/apis/gateway.networking.k8s.io/v1"


def _lines(text: str) -> list[str]:
    # The script ends its lines with "\n" only; str.splitlines() would also split on the
    # "\r", "\x85" or "\u2028" of a file the training wrote, making lines of its own.
    return text.split("\n")


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def reader_metrics(text: str) -> dict[str, Any] | None:
    """The ``tfk-metrics:`` line of the store reader's log (the version's metrics file).
    The sample request comes after it, raw: a line of the sample is never the metrics."""
    return reader_json(text, "tfk-metrics:")


def reader_json(text: str, prefix: str) -> dict[str, Any] | None:
    """The JSON object on the reader log's line that starts with ``prefix``, before the
    raw sample request (whose lines are never read as one of these)."""
    for line in _lines(text):
        if line.strip() == "tfk-sample:":
            return None
        if line.startswith(prefix):
            found = _json_or_none(line.split(":", 1)[1])
            return found if isinstance(found, dict) else None
    return None


READER_END = "tfk-end"
#: how long a finished reader's log may lack its last line before the publish gives up
READER_LOG_SETTLE_SECONDS = 30.0


def reader_complete(text: str) -> bool:
    """Does the store reader's log end with its last line? The kubelet can serve a finished
    container's log before the runtime has written its last lines to it."""
    lines = text.rstrip("\n").rsplit("\n", 1)
    return lines[-1] == READER_END


def parse_reader_log(text: str) -> tuple[list[int], int | None, dict[str, Any] | None]:
    """(versions, version read, sample request) from the store reader's log. The script
    prints its own lines before any file's content, so only their first occurrence counts."""
    versions: list[int] | None = None
    version: int | None = None
    seen_version = False
    sample = None
    lines = _lines(text)
    for i, line in enumerate(lines):
        if line.startswith("tfk-versions:") and versions is None:
            versions = sorted(n for n in map(model_version, line.split(":", 1)[1].split()) if n is not None)
        elif line.startswith("tfk-version:") and not seen_version:
            seen_version = True
            version = model_version(line.split(":", 1)[1].strip())
        elif line.strip() == "tfk-sample:":
            rest = lines[i + 1 :]
            while rest and rest[-1] == "":
                rest.pop()
            if rest and rest[-1] == READER_END:  # the script's last line, not the sample's
                rest.pop()
            found = _json_or_none("\n".join(rest))
            sample = found if isinstance(found, dict) else None
            break
    return versions or [], version, sample


class KubernetesServing(PodHealth, KubeTarget, ServingTarget):
    """:param reader_timeout_seconds: how long the store-reader Job may take.

    ``config`` are :class:`~airflow_tfk.kube.target.KubeTarget`'s: the connection, the
    identity (the Airflow task instance, as labels and annotations), the field manager.
    """

    kind = "kubernetes"
    status_timeout = 10.0

    def __init__(self, spec: ServingSpec, *, reader_timeout_seconds: float = 300.0, **config: Any) -> None:
        spec.require_claim()
        if spec.smoke_protocol == "grpc":
            from airflow_tfk.core.errors import SpecError

            raise SpecError(
                "smoke_protocol",
                "grpc is for the local backend: on Kubernetes the provider reaches TF Serving "
                "through the API server's service proxy, which carries HTTP/1.1 only",
            )
        super().__init__(**config)
        self.spec = spec
        self.reader_timeout_seconds = float(reader_timeout_seconds)
        self._store: dict[int | None, tuple[list[int], int | None, dict[str, Any] | None]] = {}
        self._metrics: dict[int, dict[str, Any] | None] = {}
        self._exports: dict[int, dict[str, Any] | None] = {}  # the tfk-export: lines
        self._files: dict[int, str] = {}  # the reader's log, for its digest line
        self._unreachable: str | None = None
        self._pod: str | None = None  # set on a view of one replica (:meth:`replicas`)

    # -- objects --------------------------------------------------------------------------
    def _apply(self, manifest: dict[str, Any]) -> int:
        return self.apply_object(self.spec.namespace, manifest)

    def _get(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            _, body = self.api.request("GET", BY_KIND[kind].item(self.spec.namespace, name))
        except Exception as exc:
            if is_not_found(exc):
                return None
            raise
        return body

    def ensure(self, emit: Emit) -> None:
        from airflow_tfk.serving._proxy_source import api_server_cidrs
        from airflow_tfk.serving.render import render_serving

        # Before anything is applied: a policy whose proxy source cannot be known, or a
        # route the cluster cannot store, fails here.
        proxy_cidrs = api_server_cidrs(self.api, self.spec.network_policy)
        if self.spec.http_route is not None:
            self._require_gateway_api()
        current = self.read_config()
        text = (current or ModelServerConfig()).to_text()
        created = []
        # The ConfigMap is applied with the model config it holds now (the policy is the
        # publish step's), so the monitoring and batching files follow the spec.
        manifests = self.checked(render_serving(self.spec, self.identity, text, api_server_cidrs=proxy_cidrs))
        existed = False
        for manifest in manifests:
            code = self._apply(manifest)
            if code == 201:
                created.append(f"{manifest['kind']} {manifest['metadata']['name']}")
            elif manifest["kind"] == "Deployment":
                existed = True
        if existed:  # a deployment made from an older spec may carry what this one drops
            wanted = {m["kind"] for m in manifests}
            for kind in OPTIONAL_KINDS:
                if kind not in wanted and self._remove(kind, self.spec.resource, optional=True):
                    emit(f"deleted {kind} {self.spec.resource}: the serving spec no longer asks for it")
        emit(
            f"TF Serving of {self.spec.model_name} in namespace {self.spec.namespace}: "
            + (f"created {', '.join(created)}" if created else "already deployed")
            + f"; reached through {self.endpoint()}"
        )

    def _require_gateway_api(self) -> None:
        try:
            self.api.request("GET", GATEWAY_API)
        except Exception as exc:
            if not is_not_found(exc):
                raise
            from airflow_tfk.core.errors import SpecError

            raise SpecError(
                "http_route",
                "is set, but the cluster does not serve gateway.networking.k8s.io/v1 "
                "(install the Gateway API CRDs, or use 'ingress')",
            ) from None

    def _remove(self, kind: str, name: str, *, optional: bool) -> bool:
        """Delete one object; False when it was not there. For a kind the spec may leave
        out, a 403 means the provider may not manage that kind here, so it never made one."""
        try:
            return self.delete_object(self.spec.namespace, kind, name)
        except Exception as exc:
            if optional and api_status(exc) == 403:
                return False
            raise

    def read_config(self) -> ModelServerConfig | None:
        cm = self._get("ConfigMap", self.spec.config_map_name)
        if cm is None:
            return None
        return parse((cm.get("data") or {}).get(CONFIG_FILE, ""))

    def write_config(self, config: ModelServerConfig) -> None:
        from airflow_tfk.serving.render import render_config_map

        self._apply(render_config_map(self.spec, config.to_text(), self.identity))

    def model_base_path(self) -> str:
        return self.spec.pod_base_path

    def server_selector(self) -> str:
        """The serving pods (not the store reader's, which carry the same serving label)."""
        from airflow_tfk.serving.render import LABEL_SERVING

        return f"{LABEL_SERVING}={self.spec.name},app.kubernetes.io/component=serving"

    def server_down(self) -> str | None:
        """Why no serving pod can answer (a crash loop, a missing image, an OOM kill, no node
        to run on), with the failing pod's log; None while one serves or may still start.
        The publish asks it while the server does not answer, and fails on it at once."""
        why = self.pod_failure(self.spec.namespace, self.server_selector())
        return f"TF Serving of {self.spec.model_name} cannot run: {why}" if why else None

    def delete(self, emit: Emit) -> None:
        wanted = {m for m, on in self._optional_wanted().items() if on}
        for kind, name in (
            # the ways in first, then the autoscaler, so nothing scales what is going away
            ("HTTPRoute", self.spec.resource),
            ("Ingress", self.spec.resource),
            ("HorizontalPodAutoscaler", self.spec.resource),
            ("Deployment", self.spec.resource),
            ("PodDisruptionBudget", self.spec.resource),
            ("Service", self.spec.resource),
            ("ConfigMap", self.spec.config_map_name),
            ("ConfigMap", self.spec.metrics_config_map_name),
            # last: the pods stay isolated until they are gone
            ("NetworkPolicy", self.spec.resource),
        ):
            optional = kind in OPTIONAL_KINDS and kind not in wanted
            if self._remove(kind, name, optional=optional):
                emit(f"deleted {kind} {name}")

    def _optional_wanted(self) -> dict[str, bool]:
        from airflow_tfk.serving.replicas import disruption_budget

        return {
            "HTTPRoute": self.spec.http_route is not None,
            "Ingress": self.spec.ingress is not None,
            "HorizontalPodAutoscaler": self.spec.autoscaling is not None,
            "PodDisruptionBudget": disruption_budget(self.spec) is not None,
        }

    # -- the replicas, each asked through its own pod proxy ----------------------------------
    def replicas(self) -> dict[str, ServingTarget]:
        """The serving pods that run, Ready or not, each as a view whose requests go
        through the API server's pod proxy; the Service itself while none runs (its
        proxy's answer then says why nothing serves).

        Not only the Ready ones: a pod is Ready once the ``stable`` label's version
        answers (the readiness probe), so on a first publish none is, and a pod that
        started during a publish must load the new version too before it may be
        counted as having it."""
        running = sorted(
            p["metadata"]["name"]
            for p in self.pods(self.spec.namespace, self.server_selector())
            if is_running(p)
        )
        if not running:
            return {f"Service {self.spec.resource}": self}
        return {name: self._on_pod(name) for name in running}

    def not_ready(self) -> list[str]:
        return sorted(
            p["metadata"]["name"]
            for p in self.pods(self.spec.namespace, self.server_selector())
            if is_running(p) and not is_ready(p)
        )

    def _on_pod(self, pod: str) -> KubernetesServing:
        view = copy.copy(self)
        view._pod = pod
        view._unreachable = None
        return view

    # -- the model store, through a reader Job ----------------------------------------------
    def _read_store(
        self, version: int | None, *, fresh: bool = False
    ) -> tuple[list[int], int | None, dict | None]:
        if version in self._store and not fresh:
            return self._store[version]
        from airflow_tfk.serving.render import render_sample_reader

        deadline = int(self.reader_timeout_seconds)
        text = self._run_reader(
            "read", lambda job: render_sample_reader(self.spec, job, version, self.identity, deadline)
        )
        result = parse_reader_log(text)
        self._store[version] = result
        if result[1] is not None:
            self._metrics[result[1]] = reader_metrics(text)
            self._exports[result[1]] = reader_json(text, "tfk-export:")
            self._files[result[1]] = text
        if version is None and result[1] is not None:
            self._store[result[1]] = result
        return result

    #: the most of a store file read through the reader's log (base64 in a log of at most
    #: LOG_LIMIT_BYTES, with room for its line ends)
    MAX_FILE_BYTES = 5 * 2**19

    def store_file(self, path: str, max_bytes: int) -> bytes:
        """Through a store-reader Job, which prints the file as base64 in its log."""
        import base64

        from airflow_tfk.serving.render import render_file_reader

        limit = min(max_bytes, self.MAX_FILE_BYTES)
        deadline = int(self.reader_timeout_seconds)
        text = self._run_reader(
            "file", lambda job: render_file_reader(self.spec, job, path, limit, self.identity, deadline)
        )
        where = f"{path} in the model store (claim {self.spec.claim})"
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("tfk-no-file:"):
                raise ServingError(f"cannot read {where}: {line.split(':', 1)[1].strip()}")
            if line.startswith("tfk-file:"):
                size = int(line.split(":", 1)[1])
                body = "".join(lines[i + 1 : lines.index(READER_END, i)])
                data = base64.b64decode(body, validate=True)
                if len(data) != size:
                    raise ServingError(f"cannot read {where}: {len(data)} bytes came of {size}")
                return data
        raise ServingError(f"cannot read {where}: the store reader printed no file")

    def _run_reader(self, kind: str, render: Callable[[str], dict[str, Any]]) -> str:
        """Run one store-reader Job (``render(job_name)``), return its log, delete it."""
        job = f"{self.spec.name}-{kind}-{secrets.token_hex(3)}"
        (reader,) = self.checked([render(job)])
        self._apply(reader)
        try:
            return self._job_log(job)
        finally:
            try:
                self.delete_object(self.spec.namespace, "Job", job)
            except Exception as exc:  # ttlSecondsAfterFinished removes it anyway
                log.warning("could not delete the store reader Job %s: %s", job, error_message(exc))

    def _job_log(self, job: str) -> str:
        deadline = time.monotonic() + self.reader_timeout_seconds
        pods_path = BY_KIND["Pod"].collection(self.spec.namespace)
        incomplete: str | None = None
        while True:
            _, body = self.api.request(
                "GET", pods_path, {"labelSelector": f"batch.kubernetes.io/job-name={job}"}
            )
            pods = (body or {}).get("items") or []
            for pod in pods:
                phase = (pod.get("status") or {}).get("phase")
                name = pod["metadata"]["name"]
                if phase in ("Succeeded", "Failed"):
                    text = self.api.text(f"{pods_path}/{name}/log")
                    if phase == "Failed":
                        raise ServingError(f"the model store reader {job} failed: {text.strip()[-500:]}")
                    if not reader_complete(text) and len(text.encode()) < LOG_LIMIT_BYTES:
                        if incomplete is None:  # the runtime is still writing it: read again
                            deadline = min(deadline, time.monotonic() + READER_LOG_SETTLE_SECONDS)
                        incomplete = text
                        continue
                    if len(text.encode()) >= LOG_LIMIT_BYTES:
                        # cut off by the read's bound: what it says about the store is partial
                        raise ServingError(
                            f"the model store reader {job} printed {LOG_LIMIT_BYTES} bytes or more "
                            f"(it prints a few KiB, and at most {MAX_STORE_JSON} bytes of each file "
                            f"it reads): {self.spec.model_name}'s directory in the store holds "
                            "more than a publish reads"
                        )
                    return text
            # A reader that cannot start (the serving image missing, no node) never ends by
            # itself before its deadline: say why now.
            stuck = self.pod_failure(self.spec.namespace, "", pods)
            if stuck is not None:
                raise ServingError(f"the model store reader {job} cannot run: {stuck}")
            if time.monotonic() > deadline:
                if incomplete is not None:
                    raise ServingError(
                        f"the model store reader {job} finished, but its log has no last line "
                        f"({READER_END!r}) after {READER_LOG_SETTLE_SECONDS:.0f} s: "
                        f"{incomplete.strip()[-500:]}"
                    )
                raise ServingError(
                    f"the model store reader {job} did not finish within {self.reader_timeout_seconds:.0f} s"
                )
            time.sleep(1.0)

    def exported_versions(self) -> list[int]:
        return self._read_store(None)[0]

    def sample_request(self, version: int) -> dict[str, Any] | None:
        return self._read_store(version)[2]

    def version_metrics(self, version: int) -> dict[str, Any] | None:
        self._read_store(version)
        return self._metrics.get(version)

    def export_info(self, version: int) -> dict[str, Any] | None:
        self._read_store(version)
        return self._exports.get(version)

    def version_files(self, version: int) -> str | None:
        """A reader Job of its own: the files as they are now, not as a read before saw them."""
        self._read_store(version, fresh=True)
        return self._version_digest(version)

    def files_as_read(self, version: int) -> str | None:
        """The digest the reader took just before it read the metrics and sample request
        this target holds for ``version`` (one Job for all three)."""
        self._read_store(version)
        return self._version_digest(version)

    def _version_digest(self, version: int) -> str | None:
        from airflow_tfk.serving.files import reader_files

        text = self._files.get(version)
        if text is None:  # the reader found no such version: it took no digest either
            return None
        return reader_files(text)

    # -- the published versions' metrics: a ConfigMap next to the model config ---------------
    def published_metrics(self) -> dict[int, dict[str, Any]]:
        cm = self._get("ConfigMap", self.spec.metrics_config_map_name)
        text = ((cm or {}).get("data") or {}).get(PUBLISHED_METRICS, "")
        try:
            found = json.loads(text) if text else {}
        except ValueError:
            return {}
        if not isinstance(found, dict):
            return {}
        return {int(k): v for k, v in found.items() if model_version(k) is not None and isinstance(v, dict)}

    def record_metrics(self, version: int, metrics: dict[str, Any]) -> None:
        from airflow_tfk.serving.render import render_metrics_config_map

        recorded = {**self.published_metrics(), int(version): dict(metrics)}
        keep = sorted(recorded)[-50:]
        text = json.dumps({str(v): recorded[v] for v in keep}, indent=1, default=str)
        self._apply(render_metrics_config_map(self.spec, text, self.identity))

    # -- TF Serving through the service proxy ---------------------------------------------
    def _rest(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
        if self._pod is not None:
            full = pod_proxy_path(self.spec.namespace, self._pod, self.spec.rest_port, path)
        else:
            full = service_proxy_path(self.spec.namespace, self.spec.resource, self.spec.rest_port, path)
        try:
            call = Call(method, full, body=body, timeout=(10.0, timeout))
            resp = self.api.client.call_api(full, method, **call.call_api_args())
            status, raw = resp.status, resp.data
        except Exception as exc:
            status = api_status(exc)
            if status is None:
                raise OSError(f"{method} {full}: {exc}") from exc
            raw = getattr(exc, "body", b"") or b""
        return answer(status, raw)

    def version_state(self, version: int, *, model: str | None = None) -> VersionState | None:
        try:
            status, body = self._rest(
                "GET", self._model_path(version, model=model), timeout=self.status_timeout
            )
        except OSError as exc:
            self._unreachable = str(exc)[:300]
            return None
        if status == 200:
            self._unreachable = None
            return parse_status(body, version)
        if isinstance(body, dict) and "error" in body:
            # TF Serving's own answer (e.g. 404: not loaded yet): the server is reachable.
            self._unreachable = None
        else:
            # The proxy's (no ready pod, the pod refusing the connection, RBAC): name it.
            detail = body.get("message") if isinstance(body, dict) else body
            proxy = f"pod {self._pod}'s proxy" if self._pod else "the service proxy"
            self._unreachable = f"HTTP {status} from {proxy}: {str(detail)[:300]}"
        return None

    def unreachable(self) -> str | None:
        return self._unreachable

    def _grpc_predict(
        self, body: dict[str, Any], version: int | None, label: str | None, timeout: float, model: str | None
    ) -> dict[str, Any]:
        raise PredictError("gRPC cannot go through the API server's service proxy (HTTP/1.1 only)")

    def endpoint(self, label: str | None = None) -> str:
        try:
            host = self.api.client.configuration.host.rstrip("/")
        except Exception as exc:  # no usable connection: still name the path
            host = f"<api server: {error_message(exc)}>"
        return host + service_proxy_path(
            self.spec.namespace, self.spec.resource, self.spec.rest_port, self._model_path(label=label)
        )
