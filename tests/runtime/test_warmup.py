"""The warm-up record the export writes, decoded with TF Serving's own protos (the runtime
encodes it by hand: the training image has no ``tensorflow-serving-api``)."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_tfk.runtime import warmup


@pytest.fixture(autouse=True)
def tensorflow():
    return pytest.importorskip("tensorflow")


@pytest.mark.parametrize(
    "inputs",
    [
        {"inputs": np.arange(6, dtype=np.float32).reshape(3, 2)},
        {"a": np.array([1, 2], dtype=np.int64), "b": np.array([[b"x", b"yz"]])},
        {"é/名": np.zeros((0, 4), dtype=np.float64)},  # non-ASCII name, an empty batch
        {"big": np.ones((300, 64), dtype=np.float32)},  # lengths past one varint byte
    ],
    ids=["one", "two-inputs", "unicode-empty", "big"],
)
def test_the_hand_encoded_log_is_what_tf_serving_decodes(inputs, tensorflow) -> None:
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    tf = tensorflow
    raw = warmup.predict_log(
        "my-model", {k: tf.make_tensor_proto(v).SerializeToString() for k, v in inputs.items()}
    )
    log = prediction_log_pb2.PredictionLog.FromString(raw)
    assert log.WhichOneof("log_type") == "predict_log"
    request = log.predict_log.request
    assert (request.model_spec.name, request.model_spec.signature_name) == ("my-model", "serving_default")
    assert sorted(request.inputs) == sorted(inputs)
    for name, value in inputs.items():
        np.testing.assert_array_equal(tf.make_ndarray(request.inputs[name]), value)
    # and the official encoder writes the same bytes (field order and all)
    official = predict_pb2.PredictRequest()
    official.model_spec.name = "my-model"
    official.model_spec.signature_name = "serving_default"
    for name in sorted(inputs):
        official.inputs[name].CopyFrom(tf.make_tensor_proto(inputs[name]))
    expected = prediction_log_pb2.PredictionLog()
    expected.predict_log.request.CopyFrom(official)
    assert prediction_log_pb2.PredictionLog.FromString(raw) == expected


def test_write_makes_a_tfrecord_file_of_one_record(tmp_path, tensorflow) -> None:
    path = warmup.write(str(tmp_path), "m", {"inputs": np.ones((2, 3), np.float32)})
    assert path.endswith("/tf_serving_warmup_requests")
    assert len(list(tensorflow.data.TFRecordDataset(path))) == 1


def _load(base: str, name: str, version: int):
    """Load one version with the model server's manager, in this process; its Version."""
    import time

    from airflow_tfk.protocol.model_config import ModelConfig
    from airflow_tfk.runtime.model_server.manager import ModelManager

    manager = ModelManager()
    manager.apply({name: ModelConfig(name=name, base_path=f"{base}/{name}", versions=(version,))})
    deadline = time.monotonic() + 120
    while manager.versions[name][version].state == "LOADING" and time.monotonic() < deadline:
        time.sleep(0.05)
    return manager.versions[name][version]


def test_the_model_server_replays_the_records_before_the_version_is_available(tmp_path, capfd, tensorflow):
    from tests.serving.models import save_linear

    path = save_linear(str(tmp_path), "linear", 1, scale=2.0)
    warmup.write(f"{path}/assets.extra", "linear", {"inputs": np.ones((2, 2), np.float32)})
    ver = _load(str(tmp_path), "linear", 1)
    assert (ver.state, ver.error_code) == ("AVAILABLE", "OK"), ver.error_message
    assert "linear version 1: warmed up with 1 request(s) in " in capfd.readouterr().err


def test_a_record_the_version_cannot_answer_fails_its_load_naming_the_record(tmp_path, tensorflow):
    """As TF Serving does: a version that fails its own warm-up would fail its clients."""
    from tensorflow_serving.apis import prediction_log_pb2

    from tests.serving.models import save_linear

    path = save_linear(str(tmp_path), "linear", 1, scale=2.0)
    good = warmup.predict_log(
        "linear", {"inputs": tensorflow.make_tensor_proto(np.ones((1, 2), np.float32)).SerializeToString()}
    )
    wrong = warmup.predict_log(
        "linear", {"inputs": tensorflow.make_tensor_proto(np.ones((1, 5), np.float32)).SerializeToString()}
    )
    classify = prediction_log_pb2.PredictionLog()
    classify.classify_log.request.model_spec.name = "linear"
    for version, records, why in (
        (1, [good, wrong], "tf_serving_warmup_requests record 2: "),
        (
            2,
            [classify.SerializeToString()],
            "record 1: a classify_log record; only predict requests are replayed",
        ),
    ):
        if version == 2:
            path = save_linear(str(tmp_path), "linear", 2, scale=2.0)
        with tensorflow.io.TFRecordWriter(f"{path}/assets.extra/{warmup.WARMUP_FILE}") as writer:
            for record in records:
                writer.write(record)
        ver = _load(str(tmp_path), "linear", version)
        assert (ver.state, ver.error_code) == ("END", "INVALID_ARGUMENT"), ver
        assert why in ver.error_message, ver.error_message
