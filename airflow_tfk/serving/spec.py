"""`ServingSpec` and `TensorBoardSpec`: typed, validated descriptions of a TF Serving
deployment and of a TensorBoard. Pure: no Kubernetes client, no TensorFlow, no templates.

Construction validates; invalid input raises :class:`~airflow_tfk.core.errors.SpecError`
naming the field, before any backend is touched.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_tfk.core import naming
from airflow_tfk.core.constants import NAMESPACE
from airflow_tfk.core.errors import SpecError, unknown_key
from airflow_tfk.serving.replicas import check_scaling
from airflow_tfk.spec.checks import image_text, path_text
from airflow_tfk.spec.cluster import (
    Resources,
    Toleration,
    _int,  # one integer rule for every spec
)
from airflow_tfk.spec.decl import Errors, check_fields, section_from
from airflow_tfk.spec.network import ServiceNetworkPolicy

if TYPE_CHECKING:
    from airflow_tfk.serving.scaling import Autoscaling, HTTPRouteSpec, IngressSpec

DEFAULT_SERVING_IMAGE = "tensorflow/serving:2.21.0"
DEFAULT_TENSORBOARD_IMAGE = "tensorflow/tensorflow:2.21.0"
MODELS_MOUNT = "/tfk/models"  # where the training pods mount it too
LOGS_MOUNT = "/tfk/logs"
#: the model config file's name in the ConfigMap and in the local server's directory
CONFIG_FILE = "models.config"
#: the published versions' metrics (the quality gate's baselines), next to the config
PUBLISHED_METRICS = "published_metrics.json"
# TF Serving resolves model names in URLs; keep them to a label-value alphabet.
_MODEL_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_IMAGE = re.compile(r"^[^\s]+$")


def _number(value: object, where: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(where, "must be a number", value)
    if not lo <= value <= hi:
        raise SpecError(where, f"must be between {lo} and {hi}", value)
    return float(value)


def _optional_path(value: object, where: str, *, absolute: bool) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and not value.strip():
        raise SpecError(where, "must not be empty", value)
    return path_text(value, where, kind="absolute" if absolute else "any")


def _sub_path(value: object, where: str) -> str:
    if value in (None, ""):
        return ""
    norm = posixpath.normpath(path_text(value, where, kind="relative"))
    return "" if norm == "." else norm


def _claim(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not naming.is_dns1123_subdomain(value):
        raise SpecError(where, "is not a valid PVC name (DNS-1123 subdomain)", value)
    return value


def _resource_name(value: object, where: str) -> str:
    if not isinstance(value, str) or not naming.is_dns1035_label(value) or len(value) > 56:
        # 56: leaves room for the ConfigMap's "-config" suffix within 63
        raise SpecError(
            where,
            "must be a DNS-1035 label of at most 56 characters "
            "(lowercase letters, digits and '-', starting with a letter)",
            value,
        )
    return value


def _store(spec: Any) -> None:
    """Where the files are: a claim (and a directory in it), or a local base path."""
    object.__setattr__(spec, "claim", _claim(spec.claim, "claim"))
    object.__setattr__(spec, "sub_path", _sub_path(spec.sub_path, "sub_path"))
    object.__setattr__(spec, "base_path", _optional_path(spec.base_path, "base_path", absolute=False))


def _common(spec: Any, kind: str) -> None:
    """The rules a TF Serving and a TensorBoard spec share (image, resources, labels, store)."""
    if not isinstance(spec.namespace, str) or not naming.is_dns1123_label(spec.namespace):
        raise SpecError("namespace", "is not a valid namespace name (DNS-1123 label)", spec.namespace)
    _image(spec)
    _resources(spec)
    for attr in ("labels", "node_selector"):
        object.__setattr__(spec, attr, _label_map(getattr(spec, attr), attr))
    _pod_rules(spec)
    object.__setattr__(spec, "network_policy", ServiceNetworkPolicy.from_value(spec.network_policy))
    if kind and spec.claim is None and spec.base_path is None:
        raise SpecError("claim", f"or 'base_path' is required: where the {kind} are")
    if spec.claim is not None and spec.base_path is not None:
        raise SpecError("claim", "and 'base_path' are exclusive: a PVC or a local directory")


def _pod_rules(spec: Any) -> None:
    """Tolerations (the training roles' rules), a priority class and a ServiceAccount."""
    raw = spec.tolerations
    if not isinstance(raw, list | tuple):
        raise SpecError("tolerations", "must be a list of tolerations", raw)
    tolerations = []
    for i, item in enumerate(raw):
        where = f"tolerations[{i}]"
        if not isinstance(item, Toleration | Mapping):
            raise SpecError(where, "must be a mapping", item)
        toleration = section_from(Toleration, item, where)
        errors = Errors()
        check_fields(toleration, where, errors)
        errors.raise_if_any()
        tolerations.append(toleration)
    object.__setattr__(spec, "tolerations", tuple(tolerations))
    for attr, what in (("priority_class", "PriorityClass"), ("service_account", "ServiceAccount")):
        value = getattr(spec, attr)
        if value is not None and (not isinstance(value, str) or not naming.is_dns1123_subdomain(value)):
            raise SpecError(attr, f"is not a valid {what} name", value)


def _image(spec: Any) -> None:
    if not isinstance(spec.image, str) or not _IMAGE.match(spec.image) or len(spec.image) > 512:
        raise SpecError("image", "must be an image reference without spaces", spec.image)
    image_text(spec.image, "image")  # the training spec's rule: no control characters
    if spec.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
        raise SpecError("image_pull_policy", "must be Always, IfNotPresent or Never", spec.image_pull_policy)
    if isinstance(spec.image_pull_secrets, (str, bytes)):  # not read as one name per character
        raise SpecError(
            "image_pull_secrets", "must be a list of Secret names, not a string", spec.image_pull_secrets
        )
    secrets = tuple(spec.image_pull_secrets or ())
    for i, s in enumerate(secrets):
        if not isinstance(s, str) or not naming.is_dns1123_subdomain(s):
            raise SpecError(f"image_pull_secrets[{i}]", "is not a valid Secret name", s)
    object.__setattr__(spec, "image_pull_secrets", secrets)


def _resources(spec: Any) -> None:
    res = spec.resources
    if res is None:
        res = Resources()
    elif isinstance(res, Mapping):
        res = Resources.from_dict(res, "resources")
    elif not isinstance(res, Resources):
        raise SpecError("resources", "must be a mapping", res)
    res.validate("resources")
    object.__setattr__(spec, "resources", res)


def _label_map(value: Any, attr: str) -> dict[str, str]:
    value = value or {}
    if not isinstance(value, Mapping):
        raise SpecError(attr, "must be a mapping", value)
    for k, v in value.items():
        if not isinstance(k, str) or not naming.is_label_key(k):
            raise SpecError(f"{attr}.{k}", "is not a valid label key")
        if attr == "labels" and (k.startswith(naming.LABEL_PREFIX) or k.startswith("app.kubernetes.io/")):
            raise SpecError(f"{attr}.{k}", "uses a prefix the platform sets itself")
        if not isinstance(v, str) or not naming.is_label_value(v):
            raise SpecError(f"{attr}.{k}", "is not a valid label value", v)
    return dict(value)


_METRICS_PATH = re.compile(r"^(/[A-Za-z0-9._~-]+)+$")
# TF Serving's BatchingParameters (session_bundle_config.proto): name -> (min, max)
BATCHING_FIELDS = {
    "max_batch_size": (1, 1 << 20),
    "batch_timeout_micros": (0, 60_000_000),
    "max_enqueued_batches": (1, 1 << 20),
    "num_batch_threads": (1, 1024),
    "max_execution_batch_size": (1, 1 << 20),
}


def _batching(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError("batching", "must be a mapping of TF Serving batching parameters", value)
    out: dict[str, Any] = {}
    for k, v in value.items():
        if k == "pad_variable_length_inputs":
            if not isinstance(v, bool):
                raise SpecError(f"batching.{k}", "must be true or false", v)
        elif k == "allowed_batch_sizes":
            if not isinstance(v, list | tuple) or not v or not all(type(x) is int and x > 0 for x in v):
                raise SpecError(f"batching.{k}", "must be a list of positive integers", v)
            v = list(v)
        elif k in BATCHING_FIELDS:
            lo, hi = BATCHING_FIELDS[k]
            _int(v, f"batching.{k}", lo, hi)
        else:
            known = sorted([*BATCHING_FIELDS, "allowed_batch_sizes", "pad_variable_length_inputs"])
            raise SpecError(f"batching.{k}", f"unknown batching parameter (known: {', '.join(known)})")
        out[str(k)] = v
    return out


def batching_text(batching: Mapping[str, Any]) -> str:
    """TF Serving's ``--batching_parameters_file`` (text proto; numbers wrapped as
    ``{ value: N }``, as its Int64Value fields want)."""
    lines = []
    for k, v in batching.items():
        if k == "pad_variable_length_inputs":
            lines.append(f"{k}: {str(v).lower()}")
        elif k == "allowed_batch_sizes":
            lines += [f"{k}: {x}" for x in v]
        else:
            lines.append(f"{k} {{ value: {int(v)} }}")
    return "\n".join(lines) + "\n"


def monitoring_text(path: str) -> str:
    """TF Serving's ``--monitoring_config_file``: the Prometheus endpoint on."""
    return f'prometheus_config {{\n  enable: true\n  path: "{path}"\n}}\n'


def _from_dict(cls: type, data: Mapping[str, Any]) -> Any:
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise SpecError("spec", "must be a mapping", data)
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - allowed, key=str)  # keys of mixed types do not compare
    if unknown:
        raise SpecError(str(unknown[0]), unknown_key(unknown[0], sorted(allowed)))
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in data]
    if missing:  # not the dataclass's TypeError: the user's error names the field
        raise SpecError(missing[0], "is required")
    return cls(**data)


@dataclass(frozen=True, kw_only=True)
class _ServerSpec:
    """What a TF Serving and a TensorBoard spec share: where their files are (a claim and a
    directory in it, or a local base path), the namespace, and their pods' image pulls,
    resources, labels, network policy, and where and as whom they run (node selector,
    tolerations, priority class, ServiceAccount: the rules a cluster sets for every pod,
    as the training's pods follow them). Keyword-only, so each spec's own
    required field stays its first positional one.

    :param image_pull_policy: the container's ``imagePullPolicy``.
    :param image_pull_secrets: Secrets of the registry the image is pulled from.
    :param labels: more labels on the pods and their objects.
    :param node_selector: the pods' ``nodeSelector``.
    :param tolerations: the pods' tolerations (``{key, operator, value, effect}``).
    :param priority_class: the pods' PriorityClass.
    :param service_account: the ServiceAccount the pods run as.
    """

    claim: str | None = None
    sub_path: str = ""
    base_path: str | None = None
    namespace: str = NAMESPACE
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    resources: Resources | Mapping[str, Any] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration | Mapping[str, Any], ...] = ()
    priority_class: str | None = None
    service_account: str | None = None
    network_policy: ServiceNetworkPolicy = field(default_factory=ServiceNetworkPolicy)


@dataclass(frozen=True)
class ServingSpec(_ServerSpec):
    """A TF Serving deployment of one model, and how new versions are published to it.

    :param model_name: the model's name in TF Serving (``/v1/models/NAME``) and the
        directory under the model store that holds its versions.
    :param claim: PVC of the model store (Kubernetes: mounted read-only at ``/tfk/models``;
        local: ``<root>/<namespace>/.claims/<claim>/``).
    :param sub_path: directory inside the claim that holds ``<model_name>/<version>/``.
    :param base_path: local backend only, instead of ``claim``: the directory that holds
        ``<model_name>/<version>/``.
    :param name: name of the Deployment and Service (default ``tfs-<model_name>``).
    :param namespace: Kubernetes namespace (local: a directory under the root).
    :param image: TF Serving image.
    :param replicas: TF Serving pods (with more than one, a PodDisruptionBudget keeps all
        but ``max_unavailable`` of them through a drain, and a publish promotes a version
        only once every ready pod has it AVAILABLE).
    :param autoscaling: a HorizontalPodAutoscaler instead of a fixed ``replicas``:
        ``{min_replicas, max_replicas, cpu_utilization}``; see
        :class:`~airflow_tfk.serving.scaling.Autoscaling`.
    :param max_unavailable: the PodDisruptionBudget's ``maxUnavailable``.
    :param ingress: an Ingress to the model's REST endpoints: ``{host, class_name,
        tls_secret, annotations}``; see :class:`~airflow_tfk.serving.scaling.IngressSpec`.
    :param http_route: a Gateway API HTTPRoute to them: ``{parent_refs, hostnames}``; see
        :class:`~airflow_tfk.serving.scaling.HTTPRouteSpec`.
    :param rest_port: REST port of the container and the Service.
    :param grpc_port: gRPC port of the container and the Service.
    :param resources: requests and limits of the TF Serving container.
    :param keep_versions: versions kept loaded after a publish (the serving one and the
        ones before it), so a rollback to the previous version is instant.
    :param poll_seconds: how often TF Serving re-reads the model config file.
    :param load_timeout_seconds: how long a new version may take to become AVAILABLE
        (on Kubernetes this includes the kubelet's ConfigMap refresh, up to ~1-2 min).
    :param predict_timeout_seconds: timeout of the smoke ``:predict``.
    :param smoke_protocol: ``rest`` (default) or ``grpc``: how the candidate's smoke
        predict is sent. gRPC needs a direct connection to the server: the local backend
        only (the API server's service proxy carries HTTP/1.1, not gRPC).
    :param monitoring: TF Serving's Prometheus endpoint on (a monitoring config file and
        ``prometheus.io/*`` scrape annotations on the pods).
    :param monitoring_path: where TF Serving serves the metrics (on the REST port).
    :param batching: server-side batching: TF Serving's batching parameters
        (``max_batch_size``, ``batch_timeout_micros``, ``max_enqueued_batches``,
        ``num_batch_threads``, ``pad_variable_length_inputs``...); None: off.
    :param network_policy: who may connect (Kubernetes): nobody but the API server's
        service proxy by default; see :class:`~airflow_tfk.spec.network.ServiceNetworkPolicy`.
    """

    model_name: str
    name: str | None = None
    image: str = DEFAULT_SERVING_IMAGE
    replicas: int = 1
    rest_port: int = 8501
    grpc_port: int = 8500
    keep_versions: int = 2
    poll_seconds: int = 10
    load_timeout_seconds: float = 300.0
    predict_timeout_seconds: float = 30.0
    smoke_protocol: str = "rest"
    monitoring: bool = True
    monitoring_path: str = "/monitoring/prometheus/metrics"
    batching: Mapping[str, Any] | None = None
    autoscaling: Autoscaling | Mapping[str, Any] | None = None
    max_unavailable: int = 1
    ingress: IngressSpec | Mapping[str, Any] | None = None
    http_route: HTTPRouteSpec | Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if (
            not isinstance(self.model_name, str)
            or len(self.model_name) > 63
            or not _MODEL_NAME.match(self.model_name)
        ):
            raise SpecError(
                "model_name",
                "must be 1-63 letters, digits, '_', '.' or '-', starting and ending with a letter or digit",
                self.model_name,
            )
        _store(self)
        name = self.name if self.name is not None else default_name("tfs", self.model_name)
        object.__setattr__(self, "name", _resource_name(name, "name"))
        _common(self, "models")
        _int(self.replicas, "replicas", 1, 100)
        _int(self.rest_port, "rest_port", 1, 65535)
        _int(self.grpc_port, "grpc_port", 1, 65535)
        if self.rest_port == self.grpc_port:
            raise SpecError("grpc_port", f"must differ from rest_port ({self.rest_port})", self.grpc_port)
        _int(self.keep_versions, "keep_versions", 1, 100)
        _int(self.poll_seconds, "poll_seconds", 1, 3600)
        object.__setattr__(
            self, "load_timeout_seconds", _number(self.load_timeout_seconds, "load_timeout_seconds", 1, 86400)
        )
        object.__setattr__(
            self,
            "predict_timeout_seconds",
            _number(self.predict_timeout_seconds, "predict_timeout_seconds", 1, 3600),
        )
        if self.smoke_protocol not in ("rest", "grpc"):
            raise SpecError("smoke_protocol", "must be 'rest' or 'grpc'", self.smoke_protocol)
        if not isinstance(self.monitoring, bool):
            raise SpecError("monitoring", "must be true or false", self.monitoring)
        if not isinstance(self.monitoring_path, str) or not _METRICS_PATH.match(self.monitoring_path):
            raise SpecError(
                "monitoring_path", "must be an absolute URL path like /metrics", self.monitoring_path
            )
        if self.batching is not None:
            object.__setattr__(self, "batching", _batching(self.batching))
        check_scaling(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServingSpec:
        return _from_dict(cls, data)

    @property
    def resource(self) -> str:
        """The Deployment's and Service's name (``name`` is always set after validation)."""
        assert self.name is not None
        return self.name

    @property
    def config_map_name(self) -> str:
        return f"{self.name}-config"

    @property
    def metrics_config_map_name(self) -> str:
        return f"{self.name}-metrics"

    @property
    def pod_base_path(self) -> str:
        """``base_path`` of the model inside the TF Serving pod."""
        return posixpath.join(MODELS_MOUNT, self.sub_path, self.model_name)

    def require_claim(self) -> str:
        if self.claim is None:
            raise SpecError("claim", "is required on Kubernetes (base_path is local-only)")
        return self.claim


@dataclass(frozen=True)
class TensorBoardSpec(_ServerSpec):
    """A TensorBoard over a training's log directory.

    :param name: name of the Deployment and Service, or of the local process.
    :param claim: PVC holding the logs (Kubernetes: mounted read-only; local:
        ``<root>/<namespace>/.claims/<claim>/``).
    :param sub_path: directory inside the claim to show.
    :param base_path: local backend only, instead of ``claim``: the log directory.
    :param port: TensorBoard's port (container and Service; local: 0 picks a free one).
    :param network_policy: who may connect (Kubernetes): nobody but the API server's
        service proxy by default; see :class:`~airflow_tfk.spec.network.ServiceNetworkPolicy`.
    """

    name: str
    image: str = DEFAULT_TENSORBOARD_IMAGE
    port: int = 6006
    reload_seconds: int = 30

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _resource_name(self.name, "name"))
        _store(self)
        _common(self, "logs")
        _int(self.port, "port", 0, 65535)
        _int(self.reload_seconds, "reload_seconds", 1, 86400)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TensorBoardSpec:
        return _from_dict(cls, data)

    @property
    def pod_logdir(self) -> str:
        return posixpath.join(LOGS_MOUNT, self.sub_path) if self.sub_path else LOGS_MOUNT


def default_name(prefix: str, text: str) -> str:
    """``<prefix>-<text>`` as a DNS-1035 label, with a hash when ``text`` was rewritten."""
    clean = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if clean != text or len(clean) > 40:
        clean = f"{clean[:36].rstrip('-')}-{naming.short_hash(text, length=6)}".strip("-")
    return f"{prefix}-{clean}"
