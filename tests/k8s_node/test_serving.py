"""Serving and TensorBoard as real pods on the node: a training exports a SavedModel into
a claim bound to a local PersistentVolume; PublishModelOperator runs the serving
Deployment (the project's stand-in model server, since no TF Serving image can be fetched:
the tier's image maps ``tensorflow_model_server`` to ``airflow_tfk.runtime.model_server``),
waits until the version is AVAILABLE, smoke-predicts through the API server's service
proxy and rolls a corrupt version back; TensorBoard serves the logs claim."""

from __future__ import annotations

import ipaddress
import json
import uuid

import pytest
from kubernetes import client

from . import _tfk
from . import node as nodemod

pytestmark = pytest.mark.k8s_node

MODEL = "digits"
# Where the API server's service proxy dials the pods from: its network namespace reaches
# the pod subnet through the CNI bridge, whose address is the subnet's first. (The address
# it advertises, 127.0.0.1, is not the source, and with --endpoint-reconciler-type=none
# there is no default/kubernetes EndpointSlice to discover it from: the spec names it, as
# it must behind konnectivity or a managed control plane.)
PROXY_SOURCE = {"api_server_cidrs": [f"{ipaddress.ip_network(nodemod.POD_SUBNET)[1]}/32"]}


def _claim(api, ns: str, volumes, name: str) -> None:
    volumes.provide(ns, name)
    client.CoreV1Api(api).create_namespaced_persistent_volume_claim(
        ns,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name="tfk-local",
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )


def _proxy_get(api, ns: str, service: str, port: int, path: str) -> str:
    resp = api.call_api(
        f"/api/v1/namespaces/{ns}/services/{service}:{port}/proxy/{path.lstrip('/')}",
        "GET",
        auth_settings=["BearerToken"],
        _preload_content=False,
    )
    return resp.data.decode()


def test_train_publish_rollback_and_tensorboard(
    k8s_node, node_api, node_ns, node_conn, local_volumes, capfd
) -> None:
    from airflow_tfk.operators.serving import PublishModelOperator
    from airflow_tfk.operators.tensorboard import TensorBoardOperator

    _claim(node_api, node_ns, local_volumes, "tfk-models")
    _claim(node_api, node_ns, local_volumes, "tfk-logs")
    models_dir = local_volumes.node.workdir / "pv"
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=1,
        args=["--tfk_steps", "60", "--tfk_checkpoint_every", "0", "--tfk_model_name", MODEL],
        storage={"models": {"claim": "tfk-models"}, "logs": {"claim": "tfk-logs"}},
    )
    assert _tfk.make_op(spec_data, cleanup="all").execute(ctx)["outcome"] == "succeeded"
    exported = sorted(models_dir.glob(f"*/{MODEL}/*/saved_model.pb"))
    assert exported, "the training exported no SavedModel into the models claim"
    version = int(exported[-1].parent.name)

    serving = {
        "image": nodemod.TRAIN_IMAGE,
        "image_pull_policy": "Never",
        "namespace": node_ns,
        "poll_seconds": 2,
        "load_timeout_seconds": 240,
        "network_policy": PROXY_SOURCE,
    }
    publish = PublishModelOperator(
        task_id="publish",
        model_name=MODEL,
        claim="tfk-models",
        kubernetes_conn_id=_tfk.CONN_ID,
        serving=serving,
    )
    result = publish.execute(ctx)
    assert result["version"] == version, result
    status = json.loads(_proxy_get(node_api, node_ns, f"tfs-{MODEL}", 8501, f"v1/models/{MODEL}"))
    states = {int(s["version"]): s["state"] for s in status["model_version_status"]}
    assert states.get(version) == "AVAILABLE", status

    # A corrupt next version: publishing it fails, and the previous one keeps serving.
    store = exported[-1].parents[1]
    bad = store / str(version + 1)
    bad.mkdir()
    (bad / "saved_model.pb").write_bytes(b"not a SavedModel")
    bad_publish = PublishModelOperator(
        task_id="publish_bad",
        model_name=MODEL,
        claim="tfk-models",
        version=version + 1,
        kubernetes_conn_id=_tfk.CONN_ID,
        serving=serving,
    )
    with pytest.raises(Exception) as err:  # noqa: B017 - the serving failure type is the publisher's
        bad_publish.execute(ctx)
    assert str(version + 1) in str(err.value), err.value
    status = json.loads(_proxy_get(node_api, node_ns, f"tfs-{MODEL}", 8501, f"v1/models/{MODEL}"))
    states = {int(s["version"]): s["state"] for s in status["model_version_status"]}
    assert states.get(version) == "AVAILABLE", status

    tb = TensorBoardOperator(
        task_id="tensorboard",
        claim="tfk-logs",
        kubernetes_conn_id=_tfk.CONN_ID,
        tensorboard={
            "image": nodemod.TRAIN_IMAGE,
            "image_pull_policy": "Never",
            "namespace": node_ns,
            "network_policy": PROXY_SOURCE,
        },
    )
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
    assert "data_location" in page or "window_title" in page, page[:500]
    TensorBoardOperator(
        task_id="tensorboard_stop",
        claim="tfk-logs",
        kubernetes_conn_id=_tfk.CONN_ID,
        tensorboard={
            "image": nodemod.TRAIN_IMAGE,
            "image_pull_policy": "Never",
            "namespace": node_ns,
            "network_policy": PROXY_SOURCE,
        },
        action="stop",
    ).execute(ctx)


def _try(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - retried by wait_for
        return None
