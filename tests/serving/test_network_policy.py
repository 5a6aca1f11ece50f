"""The NetworkPolicy of TF Serving and TensorBoard: nobody but the API server's service
proxy by default (on the HTTP port only), plus exactly the sources the user names;
selecting exactly the service's pods; the proxy's source discovered from the
``kubernetes`` EndpointSlice, or a clear error before anything is created."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving._proxy_source import api_server_cidrs
from airflow_tfk.serving.render import render_serving
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.tensorboard.render import render_tensorboard
from serving.test_render import K8S_VERSIONS, validate


def _policy(manifests):
    (np,) = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    return np


def _pod_labels(manifests):
    return [m["spec"]["template"]["metadata"]["labels"] for m in manifests if m["kind"] == "Deployment"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_default_admits_only_the_api_server_on_http(version):
    spec = ServingSpec(model_name="digits", claim="models", namespace="ml")
    manifests = render_serving(spec, api_server_cidrs=["10.0.0.10/32", "fd00::1/128"])
    np = _policy(manifests)
    validate(np, version)
    assert manifests[0] is np  # before the pods exist
    assert np["metadata"]["name"] == "tfs-digits" and np["metadata"]["namespace"] == "ml"
    assert np["spec"]["policyTypes"] == ["Ingress"]
    assert np["spec"]["ingress"] == [
        {
            "from": [{"ipBlock": {"cidr": "10.0.0.10/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}],
            "ports": [{"protocol": "TCP", "port": 8501}],
        }
    ]
    for labels in _pod_labels(manifests):
        assert np["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    # another model's pods in the same namespace are not selected
    other = render_serving(
        ServingSpec(model_name="mnist", claim="models", namespace="ml"), api_server_cidrs=[]
    )
    for labels in _pod_labels(other):
        assert not np["spec"]["podSelector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_named_sources_on_both_ports_and_nothing_when_nothing_is_named(version):
    spec = ServingSpec(
        model_name="digits",
        claim="models",
        network_policy={
            "allow_from": [
                {"namespace_labels": {"team": "web"}},
                {"pod_labels": {"app": "gateway"}},
                {"cidr": "192.168.10.0/24"},
            ],
            "api_server_cidrs": [],
        },
    )
    np = _policy(render_serving(spec))
    validate(np, version)
    assert np["spec"]["ingress"] == [
        {
            "from": [
                {"namespaceSelector": {"matchLabels": {"team": "web"}}},
                {"podSelector": {"matchLabels": {"app": "gateway"}}},
                {"ipBlock": {"cidr": "192.168.10.0/24"}},
            ],
            "ports": [{"protocol": "TCP", "port": 8501}, {"protocol": "TCP", "port": 8500}],
        }
    ]
    closed = _policy(
        render_serving(ServingSpec(model_name="d", claim="m", network_policy={"api_server_cidrs": []}))
    )
    validate(closed, version)
    assert closed["spec"]["ingress"] == []


def test_spec_cidrs_win_over_discovered_ones_and_off_means_no_policy():
    spec = TensorBoardSpec(name="tb", claim="logs", network_policy={"api_server_cidrs": ["172.18.0.2/32"]})
    np = _policy(render_tensorboard(spec, api_server_cidrs=["10.9.9.9/32"]))
    assert np["spec"]["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "172.18.0.2/32"}}], "ports": [{"protocol": "TCP", "port": 6006}]}
    ]
    off = TensorBoardSpec(name="tb", claim="logs", network_policy=False)
    assert [m["kind"] for m in render_tensorboard(off)] == ["Service", "Deployment"]


class _Api:
    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def request(self, method, path, *a, **k):
        self.calls.append((method, path))
        if isinstance(self.answer, Exception):
            raise self.answer
        return 200, self.answer


def test_discovery_reads_the_kubernetes_endpointslice():
    api = _Api({"endpoints": [{"addresses": ["10.0.0.11"]}, {"addresses": ["10.0.0.10", "fd00::a"]}]})
    policy = ServingSpec(model_name="d", claim="m").network_policy
    assert api_server_cidrs(api, policy) == ("10.0.0.10/32", "10.0.0.11/32", "fd00::a/128")
    assert api.calls == [("GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes")]
    # given in the spec, or switched off: no request at all
    api = _Api({})
    given = ServingSpec(model_name="d", claim="m", network_policy={"api_server_cidrs": ["1.2.3.4/32"]})
    assert api_server_cidrs(api, given.network_policy) == ("1.2.3.4/32",)
    assert (
        api_server_cidrs(api, ServingSpec(model_name="d", claim="m", network_policy=False).network_policy)
        is None
    )
    assert api.calls == []


def test_discovery_failure_names_the_field_and_the_fix():
    policy = ServingSpec(model_name="d", claim="m").network_policy
    with pytest.raises(SpecError) as err:
        api_server_cidrs(_Api(RuntimeError("403 Forbidden")), policy)
    assert err.value.field == "network_policy.api_server_cidrs"
    assert "apiserver-address.yaml" in str(err.value) and "403" in str(err.value)
    with pytest.raises(SpecError, match="lists no address"):
        api_server_cidrs(_Api({"endpoints": []}), policy)
