"""Network isolation options: who may reach a training cluster, a TF Serving or a TensorBoard.

TensorFlow's gRPC servers are unauthenticated: any peer that reaches a task's port can run
graphs with the pod's identity and data. On Kubernetes each training cluster therefore
gets a NetworkPolicy (on by default) that admits its TF port only from the pods of the
same cluster; serving and TensorBoard get one admitting only the sources the user names,
plus the API server's service proxy the provider itself uses.

This module holds the typed, validated options only (pure data, no Kubernetes client);
the manifests come from ``templates/networkpolicy.yaml.j2`` and
``templates/serving/networkpolicy.yaml.j2``. Enforcement is the network plugin's job: see
``docs/network-isolation.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError, unknown_key
from airflow_tfk.spec.decl import spec_field

__all__ = ["Egress", "Peer", "ServiceNetworkPolicy", "TrainingNetworkPolicy", "cidr", "host_cidr"]


class Egress(str, enum.Enum):
    """What a training's pods may connect to.

    - ``open``: anything (the policy restricts ingress only).
    - ``restricted``: the cluster's own tasks on the TF port, the cluster DNS on port 53
      (``dns_to``: the ``k8s-app: kube-dns`` pods of ``kube-system`` by default), and the
      ``egress_to`` peers.
    """

    OPEN = "open"
    RESTRICTED = "restricted"


def _labels(value: object, where: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SpecError(where, "must be a mapping of label keys to values", value)
    if len(value) > MAX_SELECTOR_LABELS:
        raise SpecError(where, f"has {len(value)} labels, over the limit of {MAX_SELECTOR_LABELS}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or not naming.is_label_key(k):
            raise SpecError(f"{where}.{k}", "is not a valid label key")
        if isinstance(v, bool) or not isinstance(v, (str, int)) or not naming.is_label_value(str(v)):
            raise SpecError(f"{where}.{k}", "is not a valid label value", v)
        out[k] = str(v)
    return out


# Bounds on the lists of a policy, checked before any item is parsed, so a list of a
# million peers is refused at the cost of len(), not of a million parses.
MAX_PEERS = 256
MAX_EXCEPT_CIDRS = 64
MAX_PORTS = 64
MAX_API_SERVER_CIDRS = 64
MAX_SELECTOR_LABELS = 64
_CIDR_MAX_CHARS = 64  # the longest IPv6 block in text form is 43 characters


def _bounded(value: Sequence[Any], where: str, limit: int, what: str) -> None:
    if len(value) > limit:
        raise SpecError(where, f"has {len(value)} {what}, over the limit of {limit}")


def cidr(value: object, where: str) -> str:
    """A CIDR block in canonical form (``10.0.0.0/8``, ``fd00::/8``); host bits must be 0.

    The API server (``IsValidCIDRForLegacyField``, strict since Kubernetes 1.33) refuses
    what Python's parser takes: a zone index (``fe80::%eth0/64``) and an IPv4-mapped IPv6
    block (``::ffff:10.0.0.0/104``); they are refused here too, so a spec that validates
    is one every supported API server admits.
    """
    if not isinstance(value, str):
        raise SpecError(where, "must be a CIDR string such as '10.0.0.0/8'", value)
    if len(value) > _CIDR_MAX_CHARS:
        raise SpecError(where, f"is not a CIDR block (over {_CIDR_MAX_CHARS} characters)", value)
    if "%" in value:
        raise SpecError(where, "must not carry an IPv6 zone index ('%...'): the API server refuses it", value)
    try:
        network = ipaddress.ip_network(value.strip(), strict=True)
    except ValueError as exc:
        raise SpecError(where, f"is not a valid CIDR block ({exc})", value) from None
    if isinstance(network, ipaddress.IPv6Network) and network.network_address.ipv4_mapped is not None:
        raise SpecError(
            where, "must not be an IPv4-mapped IPv6 block (::ffff:a.b.c.d): write the IPv4 block", value
        )
    return str(network)


def host_cidr(address: str) -> str:
    """The single-address block of an IP (``/32`` or ``/128``)."""
    ip = ipaddress.ip_address(address)
    return f"{ip}/{ip.max_prefixlen}"


def _ports(value: object, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise SpecError(where, "must be a list of port numbers", value)
    _bounded(value, where, MAX_PORTS, "ports")
    out = []
    for i, p in enumerate(value):
        if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= 65535:
            raise SpecError(f"{where}[{i}]", "must be a port number between 1 and 65535", p)
        out.append(p)
    return tuple(out)


@dataclass(frozen=True)
class Peer:
    """One source (or, for egress, destination) a policy admits.

    Either labels or a CIDR:

    :param namespace_labels: namespaces whose labels match (``{}`` = every namespace);
        alone, it admits every pod of those namespaces.
    :param pod_labels: pods whose labels match; alone, only in the policy's own namespace,
        with ``namespace_labels`` in the matching namespaces.
    :param cidr: an IP block (for sources outside the pod network, e.g. a load balancer).
    :param except_cidrs: blocks inside ``cidr`` that are not admitted.
    :param ports: egress peers only: the destination TCP ports (all when empty).
    """

    namespace_labels: Mapping[str, str] | None = spec_field(
        None, kind="str_map", keys="label", help="namespaces whose labels match (`{}`: every namespace)"
    )
    pod_labels: Mapping[str, str] | None = spec_field(
        None,
        kind="str_map",
        keys="label",
        help="pods whose labels match (in those namespaces, else in the cluster's own)",
    )
    cidr: str | None = spec_field(None, kind="str", help="or an IP block (`10.20.0.0/16`)")
    except_cidrs: tuple[str, ...] = spec_field((), kind="str_list", help="blocks inside `cidr` left out")
    ports: tuple[int, ...] = spec_field(
        (), kind="int_list", lo=1, hi=65535, help="destination TCP ports (all when empty)"
    )

    def validate(self, where: str, *, egress: bool) -> None:
        object.__setattr__(
            self, "namespace_labels", _labels(self.namespace_labels, f"{where}.namespace_labels")
        )
        object.__setattr__(self, "pod_labels", _labels(self.pod_labels, f"{where}.pod_labels"))
        has_labels = self.namespace_labels is not None or self.pod_labels is not None
        if self.cidr is not None:
            if has_labels:
                raise SpecError(
                    f"{where}.cidr",
                    "and namespace_labels/pod_labels are exclusive: one peer is one or the other",
                )
            object.__setattr__(self, "cidr", cidr(self.cidr, f"{where}.cidr"))
        elif not has_labels:
            raise SpecError(where, "needs namespace_labels, pod_labels or cidr")
        excepts = self.except_cidrs
        if isinstance(excepts, (str, bytes)) or not isinstance(excepts, Sequence):
            raise SpecError(f"{where}.except_cidrs", "must be a list of CIDR blocks", excepts)
        if excepts and self.cidr is None:
            raise SpecError(f"{where}.except_cidrs", "needs cidr")
        _bounded(excepts, f"{where}.except_cidrs", MAX_EXCEPT_CIDRS, "blocks")
        blocks = tuple(cidr(e, f"{where}.except_cidrs[{i}]") for i, e in enumerate(excepts))
        outer = ipaddress.ip_network(self.cidr) if blocks and self.cidr is not None else None
        for i, block in enumerate(blocks):
            inner = ipaddress.ip_network(block)
            # The API server wants a strict subset: an except equal to cidr is refused.
            if (
                outer is None
                or inner.version != outer.version
                or inner.prefixlen <= outer.prefixlen
                or not inner.subnet_of(outer)  # type: ignore[arg-type]
            ):
                raise SpecError(
                    f"{where}.except_cidrs[{i}]", f"must be a strict subset of cidr {self.cidr}", block
                )
        object.__setattr__(self, "except_cidrs", blocks)
        object.__setattr__(self, "ports", _ports(self.ports, f"{where}.ports"))
        if self.ports and not egress:
            raise SpecError(
                f"{where}.ports", "applies to egress_to peers only (ingress ports are the service's)"
            )

    def to_k8s(self) -> dict[str, Any]:
        """The NetworkPolicyPeer."""
        if self.cidr is not None:
            block: dict[str, Any] = {"cidr": self.cidr}
            if self.except_cidrs:
                block["except"] = list(self.except_cidrs)
            return {"ipBlock": block}
        out: dict[str, Any] = {}
        if self.namespace_labels is not None:
            out["namespaceSelector"] = {"matchLabels": dict(self.namespace_labels)}
        if self.pod_labels is not None:
            out["podSelector"] = {"matchLabels": dict(self.pod_labels)}
        return out

    @classmethod
    def from_value(cls, data: object, where: str, *, egress: bool) -> Peer:
        if isinstance(data, Peer):
            peer = data
        elif isinstance(data, Mapping):
            _string_keys(data, where)
            unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
            if unknown:
                raise SpecError(f"{where}.{unknown[0]}", unknown_key(unknown[0], _PEER_KEYS))
            kwargs = dict(data)
            for key in ("except_cidrs", "ports"):
                if isinstance(kwargs.get(key), list):
                    kwargs[key] = tuple(kwargs[key])
            peer = cls(**kwargs)
        else:
            raise SpecError(where, "must be a mapping such as {namespace_labels: {team: ml}}", data)
        peer.validate(where, egress=egress)
        return peer


_PEER_KEYS = sorted(f.name for f in dataclasses.fields(Peer))

#: The cluster DNS as kubeadm, kind, k3s and the managed clouds deploy it (CoreDNS keeps
#: kube-dns's label for compatibility).
CLUSTER_DNS = (
    Peer(namespace_labels={"kubernetes.io/metadata.name": "kube-system"}, pod_labels={"k8s-app": "kube-dns"}),
)


def _peers(value: object, where: str, *, egress: bool) -> tuple[Peer, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise SpecError(where, "must be a list of peers", value)
    _bounded(value, where, MAX_PEERS, "peers")
    return tuple(Peer.from_value(p, f"{where}[{i}]", egress=egress) for i, p in enumerate(value))


def _string_keys(data: Mapping[Any, Any], where: str) -> None:
    for key in data:
        if not isinstance(key, str):
            raise SpecError(where, "keys must be strings", key)


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(where, "must be true or false", value)
    return value


def _from_mapping(cls: type, data: object, where: str) -> Any:
    if data is None:
        return cls()
    if isinstance(data, bool):  # `network_policy: false` is the short form of switching it off
        return cls(enabled=data)
    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise SpecError(where, "must be a mapping (or true/false)", data)
    _string_keys(data, where)
    allowed = sorted(f.name for f in dataclasses.fields(cls))
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", unknown_key(unknown[0], allowed))
    return cls(**data)


@dataclass(frozen=True)
class TrainingNetworkPolicy:
    """The NetworkPolicy of a training cluster (``network_policy`` in the spec).

    :param enabled: create it (default). Switch it off only where another policy covers
        the cluster, or the network plugin does not enforce NetworkPolicy anyway.
    :param egress: ``open`` (default) or ``restricted`` (see :class:`Egress`).
    :param egress_to: restricted egress: further destinations, e.g. the data store
        ``{cidr: 10.20.0.0/16, ports: [443]}``.
    :param dns_to: restricted egress: where the pods may send DNS queries (port 53, UDP
        and TCP). Default: the cluster DNS, the ``k8s-app: kube-dns`` pods of the
        ``kube-system`` namespace (CoreDNS keeps that label). Name others where the
        cluster resolves elsewhere, e.g. a node-local cache ``[{cidr: 169.254.20.10/32}]``.
    :param metrics_from: who may scrape the spec's ``metrics_port`` (peers as in
        ``egress_to``, without ``ports``), e.g. the Prometheus pods
        ``[{namespace_labels: {kubernetes.io/metadata.name: monitoring}, pod_labels:
        {app.kubernetes.io/name: prometheus}}]``. Empty (default): nobody.
    """

    enabled: bool = spec_field(
        True,
        kind="bool",
        help="the cluster's NetworkPolicy: its TF port admits only the cluster's own pods "
        "([docs/network-isolation.md](docs/network-isolation.md)); `network_policy: false` switches it off",
    )
    egress: Egress = spec_field(
        Egress.OPEN,
        kind="enum",
        choices=Egress,
        help="`open`, or `restricted`: the cluster's tasks, DNS and `egress_to` only",
    )
    egress_to: tuple[Peer, ...] = spec_field(
        (),
        kind="sections",
        section=Peer,
        prefix="network_policy.egress_to[].",
        help="with restricted egress, more destinations (fields under `network_policy.egress_to[].`)",
    )
    dns_to: tuple[Peer, ...] | None = spec_field(
        None,
        kind="sections",
        section=Peer,
        prefix="network_policy.egress_to[].",
        help="with restricted egress, where DNS queries (port 53) may go: peers as in `egress_to`, without "
        "`ports`; none: the cluster DNS, the `k8s-app: kube-dns` pods of `kube-system`",
    )
    metrics_from: tuple[Peer, ...] = spec_field(
        (),
        kind="sections",
        section=Peer,
        prefix="network_policy.egress_to[].",
        help="who may scrape `metrics_port` (peers as in `egress_to`, without `ports`), e.g. the Prometheus "
        "pods; empty: nobody",
    )

    def validate(self, where: str = "network_policy") -> None:
        _bool(self.enabled, f"{where}.enabled")
        try:
            object.__setattr__(self, "egress", Egress(self.egress))
        except ValueError:
            raise SpecError(
                f"{where}.egress", f"must be one of {', '.join(e.value for e in Egress)}", self.egress
            ) from None
        object.__setattr__(self, "egress_to", _peers(self.egress_to, f"{where}.egress_to", egress=True))
        if self.egress_to and self.egress is not Egress.RESTRICTED:
            raise SpecError(f"{where}.egress_to", "needs egress: restricted (open egress admits everything)")
        object.__setattr__(
            self, "metrics_from", _peers(self.metrics_from, f"{where}.metrics_from", egress=False)
        )
        if self.dns_to is not None:
            object.__setattr__(self, "dns_to", _peers(self.dns_to, f"{where}.dns_to", egress=False))
            if not self.dns_to:
                raise SpecError(
                    f"{where}.dns_to", "must name at least one DNS server (pods cannot resolve without)"
                )

    def dns_peers(self) -> tuple[Peer, ...]:
        """Where DNS queries may go: ``dns_to``, or the cluster DNS when unset."""
        return CLUSTER_DNS if self.dns_to is None else self.dns_to

    @classmethod
    def from_value(cls, data: object, where: str = "network_policy") -> TrainingNetworkPolicy:
        policy: TrainingNetworkPolicy = _from_mapping(cls, data, where)
        policy.validate(where)
        return policy


@dataclass(frozen=True)
class ServiceNetworkPolicy:
    """The NetworkPolicy of a TF Serving or TensorBoard (``network_policy`` in their specs).

    :param enabled: create it (default).
    :param allow_from: who may connect to the service's ports. Nobody by default.
    :param api_server_cidrs: where the API server's service proxy connects from (the
        provider's AVAILABLE check, smoke predict and TensorBoard link go through it).
        Default: discovered from the ``kubernetes`` EndpointSlice in ``default`` when the
        objects are applied. Give them where the proxy's source is not the API server's
        advertised address (konnectivity, some managed control planes); ``[]`` admits none.
    """

    enabled: bool = True
    allow_from: tuple[Peer, ...] = ()
    api_server_cidrs: tuple[str, ...] | None = None

    def validate(self, where: str = "network_policy") -> None:
        _bool(self.enabled, f"{where}.enabled")
        object.__setattr__(self, "allow_from", _peers(self.allow_from, f"{where}.allow_from", egress=False))
        blocks = self.api_server_cidrs
        if blocks is not None:
            if isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence):
                raise SpecError(f"{where}.api_server_cidrs", "must be a list of CIDR blocks", blocks)
            _bounded(blocks, f"{where}.api_server_cidrs", MAX_API_SERVER_CIDRS, "blocks")
            object.__setattr__(
                self,
                "api_server_cidrs",
                tuple(cidr(b, f"{where}.api_server_cidrs[{i}]") for i, b in enumerate(blocks)),
            )

    @classmethod
    def from_value(cls, data: object, where: str = "network_policy") -> ServiceNetworkPolicy:
        policy: ServiceNetworkPolicy = _from_mapping(cls, data, where)
        policy.validate(where)
        return policy

    def to_dict(self) -> dict[str, Any]:
        return {
            "enabled": self.enabled,
            "allow_from": [dataclasses.asdict(p) for p in self.allow_from],
            "api_server_cidrs": None if self.api_server_cidrs is None else list(self.api_server_cidrs),
        }
