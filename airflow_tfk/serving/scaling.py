"""How a TF Serving deployment scales and is reached from outside the cluster: the
autoscaler, the disruption budget, an Ingress and a Gateway API ``HTTPRoute``.

Typed, validated parts of :class:`~airflow_tfk.serving.spec.ServingSpec` (its
``autoscaling``, ``max_unavailable``, ``ingress`` and ``http_route``). Pure: no client, no
templates. Every error names the field's path, before anything is created.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError, unknown_key
from airflow_tfk.spec.checks import MAX_MAP_ITEMS, _bounded, _int, _utf8, annotations_size

# The host name rule both APIs apply: the Ingress validation's (``IsDNS1123Subdomain``, or
# ``IsWildcardDNS1123Subdomain`` with a '*') and the Gateway API CRD's ``Hostname`` pattern
# are this one expression, with no bound on one label, and 253 characters in all.
_HOST = re.compile(r"(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
HOST_MAX_CHARS = 253
#: the most hostnames or parent references one route names (the Gateway API's own bounds)
MAX_HOSTNAMES = 16
MAX_PARENTS = 32


def _mapping(cls: type, value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(where, "must be a mapping", value)
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted((str(k) for k in value if k not in allowed), key=str)
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", unknown_key(unknown[0], sorted(allowed)))
    return dict(value)


def _host_name(value: object, where: str) -> str:
    # fullmatch: Python's '$' also matches before a final newline, Go's does not.
    if not isinstance(value, str) or len(value) > HOST_MAX_CHARS or not _HOST.fullmatch(value):
        raise SpecError(
            where,
            f"must be a DNS host name (lowercase letters, digits, '-' and '.', an optional leading "
            f"'*.', at most {HOST_MAX_CHARS} characters, no trailing dot)",
            value,
        )
    return value


def ingress_host(value: object, where: str) -> str:
    """An Ingress rule's host, as the API server's Ingress validation admits it: a host
    name, and not the digits-and-dots spelling of an IPv4 address ("must be a DNS name,
    not an IP address")."""
    host = _host_name(value, where)
    if _is_ipv4(host):
        raise SpecError(where, "must be a DNS host name, not an IP address", value)
    return host


def route_hostname(value: object, where: str) -> str:
    """An HTTPRoute hostname, as the Gateway API CRD admits it (pattern, 1 to 253
    characters). Its docs say "IPs are not allowed", but nothing in the CRD checks that
    and its pattern matches dotted IPv4, so the API server stores one; the spec takes what
    the API server takes, and a Gateway implementation decides what an IP matches."""
    return _host_name(value, where)


def _is_ipv4(value: str) -> bool:
    # The API server reads hosts with k8s.io/utils' ParseIPSloppy: four decimal parts up
    # to 255, leading zeros allowed ("010.0.0.1"). An IPv6 address has ':', never a host.
    parts = value.split(".")
    return len(parts) == 4 and all(p.isdigit() and p.isascii() and int(p) < 256 for p in parts)


def _optional_name(value: object, where: str, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not naming.is_dns1123_subdomain(value):
        raise SpecError(where, f"is not a valid {what} name (DNS-1123 subdomain)", value)
    return value


# An ingress controller pastes a "*-snippet" annotation (nginx.ingress.kubernetes.io/
# configuration-snippet, server-snippet, auth-snippet, nginx.org/location-snippets,
# haproxy.org/backend-config-snippet ...) into its own configuration: whoever writes one
# configures the shared proxy for every host behind it. Any controller, any spelling.
_SNIPPET = "snippet"


def _annotations(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(where, "must be a mapping of strings", value)
    _bounded(value, where, MAX_MAP_ITEMS)
    for k, v in value.items():
        if not isinstance(k, str) or not naming.is_label_key(k):
            raise SpecError(f"{where}.{k}", "is not a valid annotation key")
        if _SNIPPET in k.rpartition("/")[2].lower():
            raise SpecError(
                f"{where}.{k}",
                "is a snippet annotation: raw controller configuration (nginx's configuration-, "
                "server-, auth-snippet and the like) is the platform's, not a training file's",
            )
        if not isinstance(v, str) or len(v) > 4096:
            raise SpecError(f"{where}.{k}", "must be a string of at most 4096 characters", v)
        if "\x00" in v:
            raise SpecError(f"{where}.{k}", "must not contain NUL", v)
        _utf8(v, f"{where}.{k}")
    annotations_size(where, value)
    return dict(value)


@dataclass(frozen=True)
class Autoscaling:
    """A HorizontalPodAutoscaler (``autoscaling/v2``) on the TF Serving Deployment.

    :param min_replicas: the fewest pods.
    :param max_replicas: the most pods.
    :param cpu_utilization: the target average CPU use, in percent of the container's CPU
        request (so ``resources.cpu`` must be set).
    """

    max_replicas: int
    min_replicas: int = 1
    cpu_utilization: int = 80

    @classmethod
    def from_value(cls, value: object, where: str = "autoscaling") -> Autoscaling | None:
        if value is None or isinstance(value, cls):
            return value
        data = _mapping(cls, value, where)
        if "max_replicas" not in data:
            raise SpecError(f"{where}.max_replicas", "is required")
        out = cls(**data)
        _int(out.min_replicas, f"{where}.min_replicas", 1, 1000)
        _int(out.max_replicas, f"{where}.max_replicas", 1, 1000)
        _int(out.cpu_utilization, f"{where}.cpu_utilization", 1, 1000)
        if out.min_replicas > out.max_replicas:
            raise SpecError(
                f"{where}.min_replicas",
                f"must not exceed {where}.max_replicas ({out.max_replicas})",
                out.min_replicas,
            )
        return out


@dataclass(frozen=True)
class IngressSpec:
    """An Ingress (``networking.k8s.io/v1``) to the model's REST endpoints.

    Only this model's paths are routed (``/v1/models/NAME``, ``:predict``, ``:classify``,
    ``:regress``, ``/metadata``, ``/versions/...``, ``/labels/...``): not the publish's
    candidate entry, not the metrics endpoint, not other models.

    :param host: the host name it answers for; None: every host.
    :param class_name: the IngressClass; None: the cluster's default.
    :param tls_secret: a Secret with the certificate for ``host`` (TLS at the controller).
    :param annotations: the controller's own settings (e.g. timeouts, body size).
    """

    host: str | None = None
    class_name: str | None = None
    tls_secret: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_value(cls, value: object, where: str = "ingress") -> IngressSpec | None:
        if value is None or isinstance(value, cls):
            return value
        data = _mapping(cls, value, where)
        if data.get("host") == "":
            data["host"] = None  # the API server reads an empty host as none: every host
        out = cls(**data)
        if out.host is not None:
            ingress_host(out.host, f"{where}.host")
        _optional_name(out.class_name, f"{where}.class_name", "IngressClass")
        _optional_name(out.tls_secret, f"{where}.tls_secret", "Secret")
        if out.tls_secret is not None and out.host is None:
            raise SpecError(f"{where}.tls_secret", f"needs {where}.host: the certificate is for one host")
        object.__setattr__(out, "annotations", _annotations(out.annotations, f"{where}.annotations"))
        return out


@dataclass(frozen=True)
class ParentRef:
    """A Gateway (or a listener of one) the route attaches to."""

    name: str
    namespace: str | None = None
    section_name: str | None = None

    def to_k8s(self) -> dict[str, str]:
        out = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": self.name}
        if self.namespace is not None:
            out["namespace"] = self.namespace
        if self.section_name is not None:
            out["sectionName"] = self.section_name
        return out


@dataclass(frozen=True)
class HTTPRouteSpec:
    """A Gateway API ``HTTPRoute`` (``gateway.networking.k8s.io/v1``) to the model's REST
    endpoints, the same paths as :class:`IngressSpec`.

    The model's default ``:predict`` is rewritten to its ``stable`` label, so a client of
    the route gets the promoted version only, never one a publish is still loading.

    :param parent_refs: the Gateways it attaches to: ``[{name, namespace?, section_name?}]``.
    :param hostnames: the host names it answers for; empty: the Gateway's.
    """

    parent_refs: Sequence[ParentRef | Mapping[str, Any]]
    hostnames: Sequence[str] = ()

    @classmethod
    def from_value(cls, value: object, where: str = "http_route") -> HTTPRouteSpec | None:
        if value is None or isinstance(value, cls):
            return value
        data = _mapping(cls, value, where)
        refs = data.get("parent_refs")
        if isinstance(refs, (str, bytes)) or not isinstance(refs, Sequence) or not refs:
            raise SpecError(f"{where}.parent_refs", "must be a non-empty list of Gateways", refs)
        if len(refs) > MAX_PARENTS:
            raise SpecError(f"{where}.parent_refs", f"names more than {MAX_PARENTS} Gateways", len(refs))
        parents = tuple(_parent(r, f"{where}.parent_refs[{i}]") for i, r in enumerate(refs))
        _distinct_parents(parents, f"{where}.parent_refs")
        hosts = data.get("hostnames") or ()
        if isinstance(hosts, (str, bytes)) or not isinstance(hosts, Sequence):
            raise SpecError(f"{where}.hostnames", "must be a list of host names", hosts)
        if len(hosts) > MAX_HOSTNAMES:
            raise SpecError(f"{where}.hostnames", f"names more than {MAX_HOSTNAMES} hosts", len(hosts))
        names = tuple(route_hostname(h, f"{where}.hostnames[{i}]") for i, h in enumerate(hosts))
        return cls(parents, names)


def _distinct_parents(parents: Sequence[ParentRef], where: str) -> None:
    """The Gateway API's own rule (a CEL rule of its CRD): a Gateway named twice is named by
    a distinct listener (``section_name``) each time."""
    seen: dict[tuple[str, str | None], list[str | None]] = {}
    for i, p in enumerate(parents):
        sections = seen.setdefault((p.name, p.namespace), [])
        sections.append(p.section_name)
        if len(sections) > 1 and (None in sections or len(set(sections)) < len(sections)):
            raise SpecError(
                f"{where}[{i}]",
                f"names Gateway {p.name!r} again: each reference to one Gateway needs its own section_name",
            )


def _parent(value: object, where: str) -> ParentRef:
    if isinstance(value, ParentRef):
        return value
    data = _mapping(ParentRef, value, where)
    if "name" not in data:
        raise SpecError(f"{where}.name", "is required")
    if not isinstance(data["name"], str) or not naming.is_dns1123_subdomain(data["name"]):
        raise SpecError(f"{where}.name", "is not a valid Gateway name", data["name"])
    ns = data.get("namespace")
    if ns is not None and (not isinstance(ns, str) or not naming.is_dns1123_label(ns)):
        raise SpecError(f"{where}.namespace", "is not a valid namespace name", ns)
    section = data.get("section_name")
    if section is not None and (not isinstance(section, str) or not naming.is_dns1123_subdomain(section)):
        raise SpecError(f"{where}.section_name", "is not a valid listener name", section)
    return ParentRef(data["name"], ns, section)
