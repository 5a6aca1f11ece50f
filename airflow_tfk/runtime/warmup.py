"""TF Serving's warm-up records: ``assets.extra/tf_serving_warmup_requests`` of an export.

A model server replays these requests when it loads a version, before it reports the
version available, so the first client request does not pay for the first run of the
serving signature (TF Serving: "SavedModel Warmup"). The file is a TFRecord file of
``tensorflow.serving.PredictionLog`` messages, each holding a ``PredictRequest``.

The export writes one record from the app's sample request. The training image has no
TF Serving protos (``tensorflow-serving-api`` would pull in a second TensorFlow), so the
few messages are encoded here by hand, field numbers from ``prediction_log.proto``,
``predict.proto`` and ``model.proto``; a test decodes them with the official protos. The
input itself is TensorFlow's own ``TensorProto``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: the file's name under ``assets.extra/``, where TF Serving looks for it
WARMUP_FILE = "tf_serving_warmup_requests"
#: TF Serving replays at most this many records of a version
MAX_RECORDS = 1000
SIGNATURE = "serving_default"

# field numbers
_LOG_PREDICT = 6  # PredictionLog.predict_log
_PREDICT_LOG_REQUEST = 1  # PredictLog.request
_REQUEST_MODEL_SPEC, _REQUEST_INPUTS = 1, 2  # PredictRequest
_SPEC_NAME, _SPEC_SIGNATURE = 1, 3  # ModelSpec
_ENTRY_KEY, _ENTRY_VALUE = 1, 2  # a map entry


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): a message, a string or bytes."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def predict_log(model_name: str, inputs: Mapping[str, bytes], signature: str = SIGNATURE) -> bytes:
    """One serialized ``PredictionLog`` whose request asks ``model_name``'s ``signature``
    with ``inputs`` (input name -> serialized ``TensorProto``)."""
    spec = _field(_SPEC_NAME, model_name.encode()) + _field(_SPEC_SIGNATURE, signature.encode())
    request = _field(_REQUEST_MODEL_SPEC, spec)
    for name in sorted(inputs):
        entry = _field(_ENTRY_KEY, name.encode()) + _field(_ENTRY_VALUE, inputs[name])
        request += _field(_REQUEST_INPUTS, entry)
    return _field(_LOG_PREDICT, _field(_PREDICT_LOG_REQUEST, request))


def write(extra_dir: str, model_name: str, inputs: Mapping[str, Any]) -> str:
    """Write the warm-up file of one request: ``inputs`` maps the signature's input names to
    arrays. Returns its path."""
    import tensorflow as tf

    path = os.path.join(extra_dir, WARMUP_FILE)
    record = predict_log(
        model_name, {name: tf.make_tensor_proto(value).SerializeToString() for name, value in inputs.items()}
    )
    with tf.io.TFRecordWriter(path) as writer:
        writer.write(record)
    return path


def signature_inputs(fn: Any) -> list[str]:
    """The input names of a loaded signature (its keyword arguments)."""
    _args, kwargs = fn.structured_input_signature
    return sorted(kwargs)
