"""Publishing on Kubernetes, against a TEST DOUBLE of the API server (not Kubernetes):
``tests/serving/serving_double.py`` serves the API over HTTP to the real kubernetes client
and the cncf ``KubernetesHook``, proxies the service proxy to a local model server that
plays the TF Serving pod, and plays the kubelet for the ConfigMap volume and the
store-reader Job. What this proves: the objects applied, the paths used (server-side
apply, service proxy), and the publish/rollback algorithm end to end over HTTP."""

from __future__ import annotations

import json

import pytest

from airflow_tfk.serving.base import ServingError
from airflow_tfk.serving.kubernetes import KubernetesServing
from airflow_tfk.serving.publish import publish
from airflow_tfk.serving.spec import ServingSpec
from tests.serving.conftest import started_server
from tests.serving.serving_double import ServingApiDouble

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def double(model_store, tmp_path_factory):
    pod = started_server(model_store, "k8s-pod-tfs-linear")  # starts early: TF imports
    api = ServingApiDouble(str(model_store.base)).start()
    api.pods[("default", "tfs-linear")] = pod
    kubeconfig = api.kubeconfig(str(tmp_path_factory.mktemp("kube") / "config"))
    yield api, kubeconfig
    api.stop()
    pod.delete(print)
    assert not pod.running()


@pytest.fixture
def target(double, monkeypatch):
    api, kubeconfig = double
    monkeypatch.setenv(
        "AIRFLOW_CONN_TFK_SERVING_TEST",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}),
    )
    spec = ServingSpec(model_name="linear", claim="models", load_timeout_seconds=120, poll_seconds=1)
    return KubernetesServing(spec, conn_id="tfk_serving_test", reader_timeout_seconds=30)


def test_publish_rollback_through_the_service_proxy(double, target, model_store):
    api, _ = double
    model_store.ready()
    lines: list[str] = []
    result = publish(target, version=1, emit=lines.append, poll=0.2)
    assert result.endpoint == (
        f"{api.url}/api/v1/namespaces/default/services/tfs-linear:8501/proxy/v1/models/linear/labels/stable"
    )
    assert {o for o in api.labelled("tfk.airflow.apache.org/serving=tfs-linear")} >= {
        "ConfigMap/tfs-linear-config",
        "Deployment/tfs-linear",
        "Service/tfs-linear",
        "NetworkPolicy/tfs-linear",
    }
    # isolated: only the API server (its EndpointSlice's address) may reach the pods,
    # and only on the REST port its service proxy uses
    policy = api.get("networkpolicies", "tfs-linear")
    assert policy["spec"]["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "127.0.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 8501}]}
    ]
    assert api.count("apply", "deployments") >= 1
    assert any(
        p.startswith(
            "POST /api/v1/namespaces/default/services/tfs-linear:8501/proxy/"
            "v1/models/linear-tfk-candidate/versions/1:predict"
        )
        for p in api.proxied
    )
    # the sample request, the metrics and the digest of the version's files came from the
    # store through one reader Job; a second took the digest again before the label moved;
    # both are gone
    assert api.count("apply", "jobs") == 2 and not api.list("jobs")
    assert "the files of linear version 1 are the ones the gate checked" in lines
    assert target.predict({"instances": [[1.0, 2.0]]}, label="stable")["predictions"] == [[3.0]]

    # the newest export is a corrupt copy: refused, rolled back, version 1 still answers
    with pytest.raises(ServingError, match="version 5 .*failed to load.*version 1 is still"):
        publish(target, emit=lines.append, poll=0.2)
    cm = api.get("configmaps", "tfs-linear-config")
    assert "versions: 5" not in cm["data"]["models.config"]
    assert target.predict({"instances": [[1.0, 2.0]]}, label="stable")["predictions"] == [[3.0]]

    # a version whose signature rejects the sample
    with pytest.raises(ServingError, match="HTTP 400"):
        publish(target, version=4, poll=0.2)
    # (unversioned requests reach version 4 until the server re-reads the policy, as in
    # TF Serving; the label never moved)
    assert target.predict({"instances": [[1.0, 2.0]]}, label="stable")["predictions"] == [[3.0]]

    upgraded = publish(target, version=2, poll=0.2)
    assert (upgraded.version, upgraded.previous_version) == (2, 1)
    assert target.predict({"instances": [[1.0, 2.0]]}, label="stable")["predictions"] == [[6.0]]
    # ensure() on an existing deployment keeps the model policy
    target.ensure(lines.append)
    assert target.read_config().get("linear").stable == 2


def test_unreachable_service_times_out_cleanly(double, target, monkeypatch):
    api, _ = double
    other = KubernetesServing(
        ServingSpec(model_name="linear", claim="models", name="tfs-nopod", load_timeout_seconds=1),
        conn_id="tfk_serving_test",
    )
    with pytest.raises(ServingError, match="did not become AVAILABLE within 1 s") as err:
        publish(other, version=1, sample_request={"instances": [[1.0, 2.0]]}, poll=0.2)
    # the proxy's own answer is named: what points at an unready pod
    assert 'HTTP 503 from the service proxy: no endpoints available for service "tfs-nopod"' in str(
        err.value
    ), err.value
    assert "tfs-nopod" not in api.get("configmaps", "tfs-nopod-config")["data"]["models.config"]
    other.delete(print)
    assert api.labelled("tfk.airflow.apache.org/serving=tfs-nopod") == []
