"""Network isolation of a training cluster: the options, and the NetworkPolicy render()
makes of them - valid against the official schemas, selecting exactly the cluster's pods
(and no pod of another cluster in the same namespace), admitting the TF port only from
them."""

from __future__ import annotations

import functools
from unittest import mock

import kubernetes_validate
import pytest

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.network import Peer, ServiceNetworkPolicy, TrainingNetworkPolicy
from tests.helpers import MODE_SHAPES, NIGHTLY, shaped_spec

K8S_VERSIONS = ("1.29", "1.37")
IDENTITY = NIGHTLY
MODES = {
    **MODE_SHAPES,
    "namespace_per_training": {
        "mode": "between_graph",
        "ps": {"replicas": 1},
        "worker": {"replicas": 2},
        "namespace_per_training": True,
    },
}
RESTRICTED = {
    "egress": "restricted",
    "egress_to": [
        {"cidr": "10.20.0.0/16", "except_cidrs": ["10.20.1.0/24"], "ports": [443]},
        {"namespace_labels": {"kubernetes.io/metadata.name": "datasets"}, "pod_labels": {"app": "minio"}},
    ],
}

_cached_schema = functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)


def validate(manifest, version: str) -> None:
    with mock.patch.object(kubernetes_validate.utils, "schema_contents", _cached_schema):
        kubernetes_validate.validate(manifest, version, strict=True)


def make(case: str = "between_graph", **changes) -> TFClusterSpec:
    return shaped_spec(MODES[case], **{"name": "alpha", "port": 2222, **changes})


def policies(manifests):
    return [m for m in manifests if m["kind"] == "NetworkPolicy"]


def pod_templates(manifests):
    """(namespace, labels) of every pod the rendered controllers will make."""
    out = []
    for m in manifests:
        if m["kind"] == "Job":
            out.append((m["metadata"]["namespace"], m["spec"]["template"]["metadata"]["labels"]))
        elif m["kind"] == "JobSet":
            for rj in m["spec"]["replicatedJobs"]:
                labels = rj["template"]["spec"]["template"]["metadata"]["labels"]
                out.append((m["metadata"]["namespace"], labels))
    return out


def selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector as the API server evaluates it (matchLabels and matchExpressions)."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def admitted_on(policy: dict, ns: str, labels: dict, port: int) -> bool:
    """Would ``policy`` admit a connection from a pod (ns, labels) to ``port``? Pod peers
    only (no namespaceSelector means the policy's own namespace)."""
    for rule in policy["spec"].get("ingress", []):
        ports = [p["port"] for p in rule.get("ports", [])]
        if ports and port not in ports:
            continue
        for peer in rule.get("from", []):
            if "ipBlock" in peer or "namespaceSelector" in peer:
                continue
            if ns == policy["metadata"]["namespace"] and selects(peer["podSelector"], labels):
                return True
    return False


# -- options ---------------------------------------------------------------------------
def test_on_by_default_with_open_egress():
    spec = make()
    assert spec.network_policy == TrainingNetworkPolicy()
    assert spec.network_policy.enabled and spec.network_policy.egress.value == "open"


def test_false_switches_it_off_and_the_spec_round_trips():
    assert make(network_policy=False).network_policy.enabled is False
    spec = make(network_policy=RESTRICTED)
    again = TFClusterSpec.from_dict(spec.to_dict())
    assert again == spec
    assert again.network_policy.egress_to[0] == Peer(
        cidr="10.20.0.0/16", except_cidrs=("10.20.1.0/24",), ports=(443,)
    )


@pytest.mark.parametrize(
    "value, field, words",
    [
        ("yes", "network_policy", "mapping"),
        ({"enabled": "no"}, "network_policy.enabled", "true or false"),
        ({"egress": "closed"}, "network_policy.egress", "open, restricted"),
        ({"ingress_from": []}, "network_policy.ingress_from", "unknown key"),
        ({"egress_to": [{"cidr": "10.0.0.0/8"}]}, "network_policy.egress_to", "needs egress: restricted"),
        ({"egress": "restricted", "egress_to": {"cidr": "10.0.0.0/8"}}, "network_policy.egress_to", "list"),
        (
            {"egress": "restricted", "egress_to": [{}]},
            "network_policy.egress_to[0]",
            "needs namespace_labels",
        ),
        (
            {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.1/8"}]},
            "network_policy.egress_to[0].cidr",
            "host bits",
        ),
        (
            {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.0/8", "pod_labels": {"a": "b"}}]},
            "network_policy.egress_to[0].cidr",
            "exclusive",
        ),
        (
            {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.0/8", "except_cidrs": ["11.0.0.0/16"]}]},
            "network_policy.egress_to[0].except_cidrs[0]",
            "strict subset of cidr",
        ),
        (
            {
                "egress": "restricted",
                "egress_to": [{"pod_labels": {"a": "b"}, "except_cidrs": ["1.0.0.0/8"]}],
            },
            "network_policy.egress_to[0].except_cidrs",
            "needs cidr",
        ),
        (
            {"egress": "restricted", "egress_to": [{"pod_labels": {"bad key!": "x"}}]},
            "network_policy.egress_to[0].pod_labels.bad key!",
            "label key",
        ),
        (
            {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.0/8", "ports": [0]}]},
            "network_policy.egress_to[0].ports[0]",
            "between 1 and 65535",
        ),
        (
            {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.0/8", "colour": 1}]},
            "network_policy.egress_to[0].colour",
            "unknown key",
        ),
    ],
)
def test_bad_options_name_the_field(value, field, words):
    with pytest.raises(SpecError) as err:
        make(network_policy=value)
    assert err.value.field == field, err.value
    assert words in str(err.value)


def test_service_policy_options():
    policy = ServiceNetworkPolicy.from_value(
        {"allow_from": [{"namespace_labels": {"team": "web"}}], "api_server_cidrs": ["192.168.0.10/32"]}
    )
    assert policy.api_server_cidrs == ("192.168.0.10/32",)
    assert ServiceNetworkPolicy.from_value(None).api_server_cidrs is None  # discovered
    with pytest.raises(SpecError) as err:
        ServiceNetworkPolicy.from_value({"allow_from": [{"cidr": "10.0.0.0/8", "ports": [80]}]})
    assert err.value.field == "network_policy.allow_from[0].ports"
    with pytest.raises(SpecError) as err:
        ServiceNetworkPolicy.from_value({"api_server_cidrs": "10.0.0.1/32"})
    assert err.value.field == "network_policy.api_server_cidrs"
    with pytest.raises(SpecError) as err:
        ServiceNetworkPolicy.from_value({"api_server_cidrs": ["nonsense"]})
    assert err.value.field == "network_policy.api_server_cidrs[0]"


# -- the rendered policy ---------------------------------------------------------------
@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("case", sorted(MODES))
@pytest.mark.parametrize("egress", ["open", "restricted"])
@pytest.mark.parametrize("layout", ["jobs", "jobset"])
def test_policy_renders_valid_for_every_mode_and_layout(case, version, egress, layout):
    spec = make(case, network_policy=RESTRICTED if egress == "restricted" else None, layout=layout)
    manifests = render(spec, IDENTITY)
    (policy,) = policies(manifests)
    validate(policy, version)
    assert policy["metadata"]["name"] == "alpha-isolation"
    assert policy["metadata"]["namespace"] == spec.namespace_name
    # it carries the cluster's labels, so delete() (by label) removes it with the cluster
    assert policy["metadata"]["labels"][naming.LABEL_CLUSTER] == "alpha"
    assert policy["metadata"]["labels"].items() >= IDENTITY.labels().items()
    # applied before anything that makes pods
    kinds = [m["kind"] for m in manifests]
    assert kinds.index("NetworkPolicy") < min(kinds.index(k) for k in ("Job", "JobSet") if k in kinds)


@pytest.mark.parametrize("case", sorted(MODES))
@pytest.mark.parametrize("layout", ["jobs", "jobset"])
def test_selector_matches_exactly_the_clusters_pods(case, layout):
    spec = make(case, layout=layout)
    mine = render(spec, IDENTITY)
    (policy,) = policies(mine)
    selector = policy["spec"]["podSelector"]
    ns = spec.namespace_name
    pods = pod_templates(mine)
    assert len(pods) == len(spec.roles())
    for pod_ns, labels in pods:
        assert pod_ns == ns and selects(selector, labels), labels
        assert admitted_on(policy, ns, labels, spec.port)  # every task reaches every task
        assert not admitted_on(policy, ns, labels, spec.port + 1)  # only the TF port

    # Another cluster in the same namespace (another run of the same DAG, even): its pods
    # are neither selected nor admitted, and its policy does not admit ours.
    other_spec = make(case, name="beta", namespace_per_training=False, namespace=ns, layout=layout)
    other = render(other_spec, RunIdentity("nightly", "train", "scheduled__2026-01-02T00:00:00+00:00"))
    (other_policy,) = policies(other)
    for pod_ns, labels in pod_templates(other):
        assert not selects(selector, labels), labels
        assert not admitted_on(policy, pod_ns, labels, spec.port)
    for pod_ns, labels in pods:
        assert not selects(other_policy["spec"]["podSelector"], labels)
        assert not admitted_on(other_policy, pod_ns, labels, spec.port)

    # A pod of another namespace with the very same labels is not admitted either.
    assert not admitted_on(policy, "elsewhere", pods[0][1], spec.port)


def test_ingress_only_by_default():
    (policy,) = policies(render(make()))
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 2222}]
    assert rule["from"] == [
        {
            "podSelector": {
                "matchLabels": {naming.LABEL_CLUSTER: "alpha", "app.kubernetes.io/managed-by": "airflow-tfk"}
            }
        }
    ]


def test_restricted_egress_allows_the_cluster_dns_and_the_named_destinations():
    spec = make(network_policy=RESTRICTED, port=5000)
    (policy,) = policies(render(spec))
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    own, dns, store, minio = policy["spec"]["egress"]
    assert own["to"] == [{"podSelector": policy["spec"]["podSelector"]}]
    assert own["ports"] == [{"protocol": "TCP", "port": 5000}]
    # DNS goes to the cluster DNS only, not to port 53 of any address (a tunnel out)
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert dns["ports"] == [
        {"protocol": "UDP", "port": 53},
        {"protocol": "TCP", "port": 53},
    ]
    assert store == {
        "to": [{"ipBlock": {"cidr": "10.20.0.0/16", "except": ["10.20.1.0/24"]}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    }
    assert minio == {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "datasets"}},
                "podSelector": {"matchLabels": {"app": "minio"}},
            }
        ]
    }


def test_switched_off_renders_no_policy():
    assert policies(render(make(network_policy={"enabled": False}))) == []
    assert policies(render(make(network_policy=False))) == []


def test_dns_egress_is_configurable_and_never_open():
    spec = make(network_policy={**RESTRICTED, "dns_to": [{"cidr": "169.254.20.10/32"}]})
    (policy,) = policies(render(spec))
    dns = policy["spec"]["egress"][1]
    assert dns["to"] == [{"ipBlock": {"cidr": "169.254.20.10/32"}}]
    validate(policy, "1.29")
    for rule in policy["spec"]["egress"]:
        assert rule.get("to"), rule  # no rule admits every destination
    with pytest.raises(SpecError) as err:
        make(network_policy={**RESTRICTED, "dns_to": []})
    assert err.value.field == "network_policy.dns_to"
    with pytest.raises(SpecError) as err:
        make(network_policy={**RESTRICTED, "dns_to": [{"cidr": "10.0.0.10/32", "ports": [53]}]})
    assert err.value.field == "network_policy.dns_to[0].ports"


# What kube-apiserver's ValidateIPBlock refuses (IsValidCIDRForLegacyField, strict IP
# validation; except must be a strict subset of cidr), each refused at the spec already.
APISERVER_REFUSES = [
    ({"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/8"]}, "except_cidrs[0]", "strict subset"),
    ({"cidr": "fd00::/8", "except_cidrs": ["fd00::/8"]}, "except_cidrs[0]", "strict subset"),
    ({"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/255.0.0.0"]}, "except_cidrs[0]", "strict subset"),
    ({"cidr": "fe80::%eth0/64"}, "cidr", "zone"),
    ({"cidr": "fe80::%1/64"}, "cidr", "zone"),
    ({"cidr": "fe80::/10", "except_cidrs": ["fe80::%eth0/64"]}, "except_cidrs[0]", "zone"),
    ({"cidr": "::ffff:10.0.0.0/104"}, "cidr", "IPv4-mapped"),
    ({"cidr": "::ffff:0:0/96"}, "cidr", "IPv4-mapped"),
    ({"cidr": "::ffff:a00:0/104"}, "cidr", "IPv4-mapped"),
    ({"cidr": "::/0", "except_cidrs": ["::ffff:10.0.0.0/104"]}, "except_cidrs[0]", "IPv4-mapped"),
    ({"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/" + "1" * 100]}, "except_cidrs[0]", "characters"),
]


@pytest.mark.parametrize(("peer", "field", "rule"), APISERVER_REFUSES)
def test_cidrs_the_api_server_refuses_are_refused_for_every_policy(peer, field, rule):
    training = {"egress": "restricted", "egress_to": [peer]}
    with pytest.raises(SpecError, match=rule) as err:
        make(network_policy=training)
    assert err.value.field == f"network_policy.egress_to[0].{field}"
    # the serving and TensorBoard policies share the check
    with pytest.raises(SpecError, match=rule) as err:
        ServiceNetworkPolicy.from_value({"allow_from": [peer]})
    assert err.value.field == f"network_policy.allow_from[0].{field}"
    if field == "cidr":
        with pytest.raises(SpecError, match=rule):
            ServiceNetworkPolicy.from_value({"api_server_cidrs": [peer["cidr"]]})


def test_a_strict_subset_and_ipv4_compatible_blocks_are_accepted():
    peer = Peer.from_value({"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/9"]}, "p", egress=True)
    assert peer.except_cidrs == ("10.0.0.0/9",)
    assert Peer.from_value({"cidr": "fe80::/64"}, "p", egress=False).cidr == "fe80::/64"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({1: True, "colour": "x"}, "network_policy"),
        ({"enabled": True, 2: "x", "b": 1}, "network_policy"),
        (
            {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.0/8", 3: 1, "x": 2}]},
            "network_policy.egress_to[0]",
        ),
        (
            {"egress": "restricted", "egress_to": [{"pod_labels": {1: "x", "a": "b"}}]},
            "network_policy.egress_to[0]",
        ),
    ],
)
def test_mixed_type_keys_are_refused_naming_the_field(data, field):
    with pytest.raises(SpecError) as err:
        make(network_policy=data)
    assert err.value.field.startswith(field)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (
            {"egress": "restricted", "egress_to": [{"pod_labels": {"a": "b"}}] * 100_000},
            "network_policy.egress_to",
        ),
        (
            {
                "egress": "restricted",
                "egress_to": [{"cidr": "10.0.0.0/8", "except_cidrs": ["10.1.0.0/16"] * 100_000}],
            },
            "network_policy.egress_to[0].except_cidrs",
        ),
        (
            {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.0/8", "ports": [80] * 100_000}]},
            "network_policy.egress_to[0].ports",
        ),
        (
            {"egress": "restricted", "egress_to": [{"pod_labels": {f"k{i}": "v" for i in range(100_000)}}]},
            "network_policy.egress_to[0].pod_labels",
        ),
    ],
)
def test_huge_policy_lists_are_refused_before_their_items_are_parsed(policy, field):
    import time

    t0 = time.process_time()
    with pytest.raises(SpecError, match="over the limit") as err:
        make(network_policy=policy)
    assert err.value.field == field
    assert time.process_time() - t0 < 0.5
