"""Least privilege for serving and TensorBoard: as the ServiceAccount of deploy/rbac/
(bound token, kubeconfig in an Airflow ``kubernetes`` connection), every API call of the
publish lifecycle and of TensorBoard is authorised - no 403 - and the same calls in
another namespace are denied.

The nodes are KWOK's: no container runs, so TF Serving never answers and a pod log
cannot be fetched. Authorisation happens before the API server proxies a request to a
pod or a kubelet, so the proof is the status: anything but 403 passed RBAC.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from k8s import addons, harness
from kubernetes import client
from kubernetes.utils import create_from_dict

from airflow_tfk.kube.retry import api_status
from airflow_tfk.protocol.model_config import ModelConfig, ModelServerConfig
from airflow_tfk.serving.kubernetes import KubernetesServing
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.tensorboard.kubernetes import KubernetesTensorBoard
from k8s_integration import _tfk
from tests.helpers import rbac_render

rbac = rbac_render()  # deploy/rbac/render.py

pytestmark = pytest.mark.k8s
tfk_ns = _tfk.tfk_ns  # fixture
CONN = "tfk_rbac_serving"


def _status_of(call) -> int | str | None:
    """None when ``call`` succeeded, else the HTTP status it failed with (-1: no status).

    A 403 counts as RBAC's only with RBAC's message ("... is forbidden: User ... cannot");
    a 403 from anything behind the API server (here: the sandbox's egress filter, which
    the API server's service proxy meets dialling a KWOK pod IP) is reported as text.
    """
    try:
        call()
    except Exception as exc:  # the status is what is checked
        status = api_status(exc) or getattr(exc, "status", None)
        body = str(getattr(exc, "body", None) or getattr(exc, "message", None) or exc)
        if status is None and isinstance(exc.__cause__, Exception):
            status, body = api_status(exc.__cause__), str(getattr(exc.__cause__, "body", ""))
        if status is None:
            print(f"not an API status: {type(exc).__name__}: {str(exc)[:300]}")
            return -1
        if int(status) == 403 and "forbidden" not in body:
            return f"403 not from RBAC: {body[:80]}"
        return int(status)
    return None


def _complete_readers(api: Any, namespace: str, stop: threading.Event) -> None:
    """Plays the store-reader container: its pod exits 0 (KWOK annotation)."""
    core = client.CoreV1Api(api)
    done: set[str] = set()
    while not stop.is_set():
        pods = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=store-reader")
        for p in pods.items:
            if p.metadata.name not in done:
                _tfk.annotate(api, namespace, p.metadata.name, {harness.EXIT_CODE: "0"})
                done.add(p.metadata.name)
        time.sleep(0.2)


def _bound_claim(api: Any, namespace: str, claim: str) -> None:
    """A PVC bound to a static PV, so the reader pod can be scheduled (KWOK mounts nothing)."""
    core = client.CoreV1Api(api)
    pv = f"tfk-rbac-{namespace}-{claim}"
    core.create_persistent_volume(
        {
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "hostPath": {"path": "/tmp/tfk-rbac-unused"},
                "claimRef": {"namespace": namespace, "name": claim},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": claim},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )


def _lifecycle(namespace: str) -> dict[str, int | str | None]:
    """Every API call publishing and TensorBoard make, by name -> failure status (None: ok)."""
    # The namespaced Role cannot read default/kubernetes's EndpointSlice (that is the optional
    # deploy/rbac/apiserver-address.yaml), so the proxy's source is given, as the docs tell
    # least-privilege deployments to do.
    policy = {"api_server_cidrs": ["127.0.0.1/32"]}
    # every object a serving spec can ask for: autoscaler, disruption budget, Ingress, HTTPRoute
    spec = ServingSpec(
        model_name="digits",
        claim="models",
        namespace=namespace,
        poll_seconds=5,
        network_policy={**policy, "allow_from": [{"namespace_labels": {"team": "edge"}}]},
        autoscaling={"min_replicas": 2, "max_replicas": 3},
        resources={"cpu": "100m"},
        ingress={"host": "ml.example.com"},
        http_route={"parent_refs": [{"name": "edge"}]},
    )
    target = KubernetesServing(spec, conn_id=CONN, reader_timeout_seconds=60)
    config = ModelServerConfig((ModelConfig("digits", spec.pod_base_path, versions=(1,)),))
    lines: list[str] = []
    tb = KubernetesTensorBoard(
        TensorBoardSpec(name="tb-digits", claim="logs", namespace=namespace, network_policy=policy),
        conn_id=CONN,
    )
    proxy = target._rest  # status of a proxied request, as the publish step sees it
    return {
        "ensure (apply Deployment, Service, ConfigMap)": _status_of(lambda: target.ensure(lines.append)),
        "read the model config": _status_of(target.read_config),
        "write the model config": _status_of(lambda: target.write_config(config)),
        "store reader Job, its pod and its log": _status_of(lambda: target._read_store(None)),
        "GET version status (proxy)": _status_of(lambda: _raise_on(proxy("GET", "/v1/models/digits"))),
        "POST :predict (proxy)": _status_of(
            lambda: _raise_on(proxy("POST", "/v1/models/digits:predict", {"instances": [[1.0]]}, 5.0))
        ),
        "each replica's version status (pod proxy)": _status_of(lambda: _each_replica(target)),
        "record the published metrics": _status_of(lambda: target.record_metrics(1, {"accuracy": 0.9})),
        "read the published metrics": _status_of(target.published_metrics),
        "TensorBoard start": _status_of(lambda: tb.start(lines.append)),
        "TensorBoard through the proxy": _status_of(lambda: _get(tb)),
        "TensorBoard stop": _status_of(lambda: tb.stop(lines.append)),
        "delete serving": _status_of(lambda: target.delete(lines.append)),
    }


class _Status(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(status)
        self.status = status
        self.body = json.dumps(body) if isinstance(body, dict) else str(body)


def _raise_on(answer: tuple[int, Any]) -> None:
    if answer[0] >= 400:
        raise _Status(answer[0], answer[1])


def _each_replica(target: KubernetesServing) -> None:
    """The publish's per-replica status read, through the pod proxy of each running pod
    (KWOK runs the pods within seconds of the ensure)."""
    deadline = time.monotonic() + 30
    views = target.replicas()
    while not all(v._pod for v in views.values()):
        assert time.monotonic() < deadline, "no running serving pod: the pod proxy was not asked"
        time.sleep(0.5)
        views = target.replicas()
    for view in views.values():
        _raise_on(view._rest("GET", "/v1/models/digits"))


def _get(tb: KubernetesTensorBoard) -> None:
    path = tb.url.split(tb.api.client.configuration.host.rstrip("/"), 1)[1]
    resp = tb.api.client.call_api(
        path, "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
    )
    if resp.status >= 400:
        raise _Status(resp.status, resp.data)


def test_serving_and_tensorboard_need_no_more_than_the_role(k8s_cluster, k8s_api, tfk_ns, tmp_path) -> None:
    addons.install(k8s_api, addons.GATEWAY_API)  # the spec's HTTPRoute needs its CRD
    for d in rbac.manifests(tfk_ns):
        create_from_dict(k8s_api, d, namespace=tfk_ns)
    token = k8s_cluster.service_account_token(tfk_ns, rbac.SERVICE_ACCOUNT)
    kubeconfig = k8s_cluster.kubeconfig_for_token(
        tmp_path / "sa.kubeconfig", token, rbac.SERVICE_ACCOUNT, tfk_ns
    )
    _bound_claim(k8s_api, tfk_ns, "models")  # the model store the reader Job mounts
    _bound_claim(k8s_api, tfk_ns, "logs")  # TensorBoard's: its start waits for a Ready pod
    stop = threading.Event()
    driver = threading.Thread(target=_complete_readers, args=(k8s_api, tfk_ns, stop), daemon=True)
    driver.start()
    other = f"t-other-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(k8s_api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        with _tfk.use_connection(kubeconfig, CONN):
            here = _lifecycle(tfk_ns)
            print("as the ServiceAccount, in its namespace:", here)
            # the objects really were there (not just "no 403" because nothing happened)
            assert here["ensure (apply Deployment, Service, ConfigMap)"] is None
            assert here["record the published metrics"] is None and here["read the published metrics"] is None
            # the reader pod ran (KWOK) and its log was asked for: a status from the API
            # server, not the reader's own timeout
            assert here["store reader Job, its pod and its log"] != -1, here
            assert here["TensorBoard start"] is None, here  # its pod was Ready
            # a Ready replica was found and its pod proxy answered with an API status
            assert here["each replica's version status (pod proxy)"] != -1, here
            forbidden = {call: s for call, s in here.items() if s == 403}
            assert forbidden == {}, here
            elsewhere = _lifecycle(other)
            print("as the ServiceAccount, in another namespace:", elsewhere)
        denied = {call: s for call, s in elsewhere.items() if s == 403}
        # every call that reaches the API server in the other namespace is refused
        assert set(denied) >= {
            "ensure (apply Deployment, Service, ConfigMap)",
            "read the model config",
            "write the model config",
            "GET version status (proxy)",
            "POST :predict (proxy)",
            "each replica's version status (pod proxy)",
            "TensorBoard start",
            "delete serving",
        }, elsewhere
        apps = client.AppsV1Api(k8s_api)
        assert apps.list_namespaced_deployment(other).items == []
        assert apps.list_namespaced_deployment(tfk_ns).items == []  # deleted by the lifecycle
    finally:
        stop.set()
        driver.join(timeout=5)
        core.delete_namespace(other)
        for claim in ("models", "logs"):
            core.delete_persistent_volume(f"tfk-rbac-{tfk_ns}-{claim}")
