"""Serving and TensorBoard as real pods on the node: a training exports a SavedModel into
a claim bound to a local PersistentVolume; TFPublishModelOperator runs the serving
Deployment (the project's stand-in model server, since no TF Serving image can be fetched:
the tier's image maps ``tensorflow_model_server`` to ``airflow_tfk.runtime.model_server``)
on two replicas, waits until the version is AVAILABLE on both, smoke-predicts and rolls a
corrupt version back. Each replica then answers at its own pod IP, a client calls the
model over gRPC on the Service's port 8500 (``PredictionService.Predict`` and
``ModelService.GetModelStatus``), and TensorBoard serves the logs claim through the
service proxy. Everything runs as deploy/rbac's ServiceAccount.

gRPC cannot go through the API server's service proxy (it carries HTTP/1.1), and the test
process is outside the node's network namespace, so the gRPC client goes through a loopback
forward into that namespace to the address the Service's EndpointSlice lists for its
``grpc`` port (node.py's ``Node.forward``; there is no kube-proxy here, so no ClusterIP)."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from kubernetes import client

from . import _serving, _tfk
from . import node as nodemod

pytestmark = pytest.mark.k8s_node

MODEL = "digits"
# Where the API server's service proxy dials the pods from: its network namespace reaches
# the pod subnet through the CNI bridge, whose address is the subnet's first. (The address
# it advertises, 127.0.0.1, is not the source, and with --endpoint-reconciler-type=none
# there is no default/kubernetes EndpointSlice to discover it from: the spec names it, as
# it must behind konnectivity or a managed control plane.)
PROXY_SOURCE = {"api_server_cidrs": [f"{ipaddress.ip_network(nodemod.POD_SUBNET)[1]}/32"]}


def _claim(api, ns: str, volumes, name: str) -> Path:
    """The claim ``name`` in ``ns``, bound to a volume of its own; that volume's directory."""
    path = volumes.provide(ns, name)
    _tfk.create_claim(api, ns, name, storage_class="tfk-local")
    return path


GRPC_CLIENT = r"""
import json, sys
import grpc
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc
from airflow_tfk.runtime.model_server.grpc_client import predict, signature_inputs

address, model, saved, request = sys.argv[1:5]
out = {"predict": predict(address, model, json.loads(request), signature_inputs(saved), timeout=60)}
req = get_model_status_pb2.GetModelStatusRequest()
req.model_spec.name = model
with grpc.insecure_channel(address) as ch:
    reply = model_service_pb2_grpc.ModelServiceStub(ch).GetModelStatus(req, timeout=60)
state = get_model_status_pb2.ModelVersionStatus.State
out["status"] = sorted([s.version, state.Name(s.state)] for s in reply.model_version_status)
print(json.dumps(out))
"""


def _grpc_endpoint(api, ns: str, service: str) -> tuple[str, int]:
    """(pod address, port) the Service's EndpointSlice lists for its ``grpc`` port."""
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={service}"
    )
    for sl in slices.items:
        ports = {p.name: p.port for p in sl.ports or []}
        for ep in sl.endpoints or []:
            if "grpc" in ports and ep.addresses and (ep.conditions is None or ep.conditions.ready):
                return ep.addresses[0], ports["grpc"]
    raise AssertionError(f"no ready grpc endpoint of Service {service}: {slices.items}")


def _proxy_post(api, ns: str, service: str, port: int, path: str, body: dict) -> dict:
    resp = api.call_api(
        f"/api/v1/namespaces/{ns}/services/{service}:{port}/proxy/{path.lstrip('/')}",
        "POST",
        header_params={"Content-Type": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return json.loads(resp.data.decode())


def _proxy_get(api, ns: str, service: str, port: int, path: str) -> str:
    resp = api.call_api(
        f"/api/v1/namespaces/{ns}/services/{service}:{port}/proxy/{path.lstrip('/')}",
        "GET",
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return resp.data.decode()


def test_train_publish_rollback_and_tensorboard(
    k8s_node, node_api, node_ns, node_conn, local_volumes, capfd
) -> None:
    from airflow_tfk.operators.serving import TFPublishModelOperator
    from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator

    # this test's own models volume: the node's other volumes hold other tests' digits
    # exports (the first CI runs of the swap step below copied another test's version)
    models_dir = _claim(node_api, node_ns, local_volumes, "tfk-models")
    _claim(node_api, node_ns, local_volumes, "tfk-logs")
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    took: dict[str, float] = {}
    t0 = time.monotonic()
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=1,
        args=["--tfk_steps", "60", "--tfk_checkpoint_every", "0", "--tfk_model_name", MODEL],
        storage={"models": {"claim": "tfk-models"}, "logs": {"claim": "tfk-logs"}},
    )
    assert _tfk.make_op(spec_data, cleanup="all").execute(ctx)["outcome"] == "succeeded"
    exported = sorted(models_dir.glob(f"{MODEL}/*/saved_model.pb"))
    assert exported, "the training exported no SavedModel into the models claim"
    version = int(exported[-1].parent.name)
    took["train+export"], t0 = time.monotonic() - t0, time.monotonic()

    serving = {
        "image": nodemod.TRAIN_IMAGE,
        "image_pull_policy": "Never",
        "namespace": node_ns,
        "poll_seconds": 2,
        "load_timeout_seconds": 240,
        "network_policy": PROXY_SOURCE,
        # two replicas: the publish promotes a version only once both have it
        "replicas": 2,
    }
    # The gate measures the version itself: the app's held-out rows, read from the claim
    # by a store-reader Job, sent to the loaded candidate through the Service.
    from airflow_tfk.runtime.examples.digits_app import load_data
    from tests.serving.models import write_eval_csv

    _, _, x_test, y_test = load_data()
    write_eval_csv(str(models_dir), "eval/digits.csv", x_test, y_test)
    publish = TFPublishModelOperator(
        task_id="publish",
        model_name=MODEL,
        claim="tfk-models",
        kubernetes_conn_id=_tfk.CONN_ID,
        serving=serving,
        quality_gate={"thresholds": {"accuracy": 0.2}, "evaluate": {"data": "eval/digits.csv"}},
    )
    result = publish.execute(ctx)
    took["publish (first: deploy, load, smoke, evaluate, promote)"], t0 = (
        time.monotonic() - t0,
        time.monotonic(),
    )
    assert result["version"] == version, result
    out = capfd.readouterr().out
    evaluated = f"independent evaluation of {MODEL} version {version} on eval/digits.csv ({len(y_test)} rows)"
    assert evaluated in out, out[-3000:]
    # untouched since the reader Job read its metrics: the files were checked, and promoted
    checked = f"the files of {MODEL} version {version} are the ones the gate checked"
    assert checked in out
    status = json.loads(_proxy_get(node_api, node_ns, f"tfs-{MODEL}", 8501, f"v1/models/{MODEL}"))
    states = {int(s["version"]): s["state"] for s in status["model_version_status"]}
    assert states.get(version) == "AVAILABLE", status

    # The policy (not enforced here: no network-policy plugin) admits the proxy's real
    # source on REST only; gRPC is for `allow_from`, which is empty.
    policy = client.NetworkingV1Api(node_api).read_namespaced_network_policy(f"tfs-{MODEL}", node_ns)
    (rule,) = policy.spec.ingress
    assert [p.ip_block.cidr for p in rule._from] == PROXY_SOURCE["api_server_cidrs"], rule
    assert [p.port for p in rule.ports] == [8501], rule

    # A corrupt next version: publishing it fails, and the previous one keeps serving.
    store = exported[-1].parents[1]
    bad = store / str(version + 1)
    bad.mkdir()
    (bad / "saved_model.pb").write_bytes(b"not a SavedModel")
    bad_publish = TFPublishModelOperator(
        task_id="publish_bad",
        model_name=MODEL,
        claim="tfk-models",
        version=version + 1,
        kubernetes_conn_id=_tfk.CONN_ID,
        serving=serving,
    )
    with pytest.raises(Exception) as err:  # the serving failure type is the publisher's
        bad_publish.execute(ctx)
    assert str(version + 1) in str(err.value), err.value
    took["corrupt candidate rolled back"], t0 = time.monotonic() - t0, time.monotonic()
    status = json.loads(_proxy_get(node_api, node_ns, f"tfs-{MODEL}", 8501, f"v1/models/{MODEL}"))
    states = {int(s["version"]): s["state"] for s in status["model_version_status"]}
    assert states.get(version) == "AVAILABLE", status

    # gRPC on the Service's port 8500, from outside the cluster network: the same sample
    # answers as over REST, from the version that survived the rollback.
    sample_file = exported[-1].parent / "assets.extra" / "tfk_sample_request.json"
    sample = json.loads(sample_file.read_text())
    rest = _proxy_post(node_api, node_ns, f"tfs-{MODEL}", 8501, f"v1/models/{MODEL}:predict", sample)
    # Each replica, asked at its own pod IP, answers the stable label with the same version.
    ips = _serving.ready_pod_ips(node_api, node_ns, f"tfs-{MODEL}")
    assert len(ips) == 2, ips
    with _serving.pod_ports(k8s_node, ips, 8501) as ports:
        answers = {
            pod: _serving.post(port, f"/v1/models/{MODEL}/labels/stable:predict", sample)
            for pod, port in ports.items()
        }
    assert all(status == 200 for status, _ in answers.values()), answers
    assert all(_same_predictions(a["predictions"], rest["predictions"]) for _, a in answers.values()), answers
    took["both replicas answer at their pod IPs"], t0 = time.monotonic() - t0, time.monotonic()
    host, grpc_port = _grpc_endpoint(node_api, node_ns, f"tfs-{MODEL}")
    assert grpc_port == 8500
    with k8s_node.forward(host, grpc_port) as local:
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                GRPC_CLIENT,
                f"127.0.0.1:{local}",
                MODEL,
                str(exported[-1].parent),
                json.dumps(sample),
            ],
            cwd=nodemod.REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["predict"]["model_version"] == version, got
    assert _same_predictions(got["predict"]["predictions"], rest["predictions"]), (got, rest)
    assert got["status"] == [[version, "AVAILABLE"]], got
    took["gRPC Predict+GetModelStatus (client process, imports TF)"], t0 = (
        time.monotonic() - t0,
        time.monotonic(),
    )

    # A version rewritten after its gate (after the gRPC checks: it loads before it is
    # refused, and TF Serving unloads it at its next config poll)
    _swapped_after_the_gate_is_refused(ctx, serving, store, version)
    took["files rewritten after the gate: refused"], t0 = time.monotonic() - t0, time.monotonic()
    stable = json.loads(
        _proxy_get(node_api, node_ns, f"tfs-{MODEL}", 8501, f"v1/models/{MODEL}/labels/stable")
    )
    assert [int(s["version"]) for s in stable["model_version_status"]] == [version], stable
    config = client.CoreV1Api(node_api).read_namespaced_config_map(f"tfs-{MODEL}-config", node_ns)
    assert f"versions: {version + 2}" not in config.data["models.config"], config.data

    def board(task_id: str, **kwargs) -> TFStartTensorBoardOperator:
        """TensorBoard over the logs claim, on the node's image, reachable by the proxy."""
        return TFStartTensorBoardOperator(
            task_id=task_id,
            claim="tfk-logs",
            kubernetes_conn_id=_tfk.CONN_ID,
            tensorboard={
                "image": nodemod.TRAIN_IMAGE,
                "image_pull_policy": "Never",
                "namespace": node_ns,
                "network_policy": PROXY_SOURCE,
            },
            **kwargs,
        )

    tb = board("tensorboard")
    pushed: dict = {}
    ctx["ti"].xcom_push = lambda key, value: pushed.update({key: value})
    info = tb.execute(ctx)
    assert info and info["name"] and pushed, info
    name, port = info["name"], tb.spec(ctx["ti"].dag_id).port
    page = _tfk.wait_for(
        "TensorBoard answers through the service proxy",
        lambda: _try(lambda: _proxy_get(node_api, node_ns, name, port, "data/environment")),
        180,
        every=1,
    )
    took["TensorBoard start to answering"], t0 = time.monotonic() - t0, time.monotonic()
    assert json.loads(page)["data_location"] == tb.spec(ctx["ti"].dag_id).pod_logdir, page[:500]
    # It reads the claim: the training's event files show up as a run.
    runs = _tfk.wait_for(
        "TensorBoard lists the training's run",
        lambda: json.loads(_try(lambda: _proxy_get(node_api, node_ns, name, port, "data/runs")) or "[]"),
        120,
        every=2,
    )
    assert any(r.endswith("worker-0") for r in runs), runs
    # Its page's relative links resolve under the proxy path.
    index = _proxy_get(node_api, node_ns, name, port, "")
    assert 'src="index.js' in index, index[:500]
    assert _proxy_get(node_api, node_ns, name, port, "index.js")
    board("tensorboard_stop", action="stop").execute(ctx)
    with pytest.raises(client.ApiException) as gone:
        client.AppsV1Api(node_api).read_namespaced_deployment(name, node_ns)
    assert gone.value.status == 404
    print("serving on the node, seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in took.items()))


def _swapped_after_the_gate_is_refused(ctx: dict, serving: dict, store, version: int) -> None:
    """A good copy of ``version`` passes the quality gate on the metrics its reader Job
    read from the claim; then a training rewrites its graph file with the same bytes. It
    loads and answers the smoke test on both replicas, but its files are not the ones the
    gate checked: not promoted, and ``version`` keeps serving."""
    from airflow_tfk.operators._context import identity_from_context
    from airflow_tfk.operators.serving import TFPublishModelOperator
    from airflow_tfk.serving.base import ServingError
    from airflow_tfk.serving.gate import QualityGate
    from airflow_tfk.serving.publish import publish
    from airflow_tfk.serving.targets import get_serving_target

    swapped = version + 2
    shutil.copytree(store / str(version), store / str(swapped))
    owner = (store / str(version)).stat()  # the training's user, as the pods run
    for path in [store / str(swapped), *(store / str(swapped)).rglob("*")]:
        os.chown(path, owner.st_uid, owner.st_gid)
    op = TFPublishModelOperator(
        task_id="publish_swapped",
        model_name=MODEL,
        claim="tfk-models",
        kubernetes_conn_id=_tfk.CONN_ID,
        serving=serving,
    )
    target = get_serving_target(
        "kubernetes", op.spec(), **op.backend_options(), identity=identity_from_context(ctx)
    )
    graph = store / str(swapped) / "saved_model.pb"
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if line.startswith(f"quality gate on {MODEL} version {swapped}"):
            graph.write_bytes(graph.read_bytes())  # re-exported over it, after the gate

    gate = QualityGate.from_dict({"thresholds": {"accuracy": 0.0}})
    with pytest.raises(ServingError) as err:
        publish(target, swapped, emit=emit, gate=gate)
    text = str(err.value)
    assert any(
        line.startswith(f"quality gate on {MODEL} version {swapped}, metrics from") for line in lines
    ), (text, lines)
    assert f"the files of {MODEL} version {swapped} changed after the quality gate" in text, text
    assert "changed: saved_model.pb" in text and f"version {version} is still serving" in text, text
    # refused at the last step: loaded under the model's own name, the label never moved
    assert any(line.startswith(f"promoting {MODEL} version {swapped}") for line in lines), lines
    assert not any("moving the 'stable' label" in line for line in lines), lines


def _same_predictions(a: list, b: list) -> bool:
    """Rows equal within float tolerance; a row is a value, a list or a dict of outputs."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict) or isinstance(y, dict):
            if not (isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys()):
                return False
            if not all(np.allclose(x[k], y[k], rtol=1e-5) for k in x):
                return False
        elif not np.allclose(x, y, rtol=1e-5):
            return False
    return True


def _try(fn):
    try:
        return fn()
    except Exception:  # retried by wait_for
        return None
