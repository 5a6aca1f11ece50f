"""Serving and TensorBoard fail with their pods' own reason on a real kubelet: a serving
image whose server exits at start fails the publish within 60 s (not at its 240 s load
timeout), naming the pod, the crash loop and the server's last log line; TensorBoard with
an image the node does not have fails its task naming ``ErrImageNeverPull``."""

from __future__ import annotations

import time

import pytest

from . import _tfk
from . import node as nodemod
from .test_serving import PROXY_SOURCE

pytestmark = pytest.mark.k8s_node

CRASHING = "tfk.local/serving-crash:1"
LAST_WORDS = "tfk-test: cannot read the model config"


def _crashing_image(node: nodemod.Node, tmp_path) -> None:
    """The tier's skeleton image whose ``tensorflow_model_server`` prints one line and exits 3."""
    files = nodemod._skeleton([dest for _, dest in node._bind_mounts()])
    files["opt/tfk/bin/tensorflow_model_server"] = (
        0o755,
        f"#!/bin/sh\necho '{LAST_WORDS}' >&2\nexit 3\n".encode(),
    )
    tar = tmp_path / "serving-crash.tar"
    nodemod.docker_save_tar(tar, CRASHING, files, {"Env": ["PATH=/opt/tfk/bin:/usr/bin:/bin", "HOME=/tmp"]})
    node.import_image(tar)


def test_crash_looping_serving_and_a_missing_tensorboard_image_fail_with_their_reason(
    k8s_node, node_api, node_ns, node_conn, local_volumes, tmp_path
) -> None:
    from airflow_tfk.operators.serving import TFPublishModelOperator
    from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator

    _crashing_image(k8s_node, tmp_path)
    for claim in ("tfk-models", "tfk-logs"):
        local_volumes.provide(node_ns, claim)
        _tfk.create_claim(node_api, node_ns, claim, storage_class="tfk-local")
    ctx = _tfk.task_context("manual__whyfail")
    publish = TFPublishModelOperator(
        task_id="publish",
        model_name="digits",
        claim="tfk-models",
        version=1,
        sample_request={"instances": [[0.0]]},
        metrics={"accuracy": 1.0},
        kubernetes_conn_id=_tfk.CONN_ID,
        serving={
            "image": CRASHING,
            "image_pull_policy": "Never",
            "namespace": node_ns,
            "poll_seconds": 2,
            "load_timeout_seconds": 240,
            "network_policy": PROXY_SOURCE,
        },
    )
    t0 = time.monotonic()
    with pytest.raises(Exception) as err:  # the serving failure type is the publisher's
        publish.execute(ctx)
    took = time.monotonic() - t0
    text = str(err.value)
    assert "TF Serving of digits cannot run: pod tfs-digits-" in text, text
    assert ": CrashLoopBackOff (exit code 3)" in text and LAST_WORDS in text, text
    assert took < 60, took

    board = TFStartTensorBoardOperator(
        task_id="tensorboard",
        claim="tfk-logs",
        kubernetes_conn_id=_tfk.CONN_ID,
        tensorboard={
            "image": "tfk.local/no-such-image:1",
            "image_pull_policy": "Never",
            "namespace": node_ns,
            "network_policy": PROXY_SOURCE,
        },
    )
    t1 = time.monotonic()
    with pytest.raises(Exception) as tb_err:  # TensorBoardFailed, by message
        board.execute(ctx)
    tb_took = time.monotonic() - t1
    assert ": ErrImageNeverPull" in str(tb_err.value), tb_err.value
    print(f"crash-looping serving: publish failed in {took:.1f}s; TensorBoard bad image in {tb_took:.1f}s")
    print(f"the publish said: {text[:800]}\nTensorBoard said: {str(tb_err.value)[:400]}")
