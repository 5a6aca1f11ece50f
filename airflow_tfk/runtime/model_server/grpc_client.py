"""A gRPC ``Predict`` client for TF Serving (or the stand-in), taking and returning the
REST API's JSON shapes, so one sample request serves both protocols.

gRPC names every input, while a REST row request may leave a single input unnamed: the
names and dtypes come from the SavedModel's ``serving_default`` signature, read from its
``saved_model.pb`` (no model load). Imports TensorFlow (the protos need it): runtime side.
The provider runs it as a subprocess::

    python -m airflow_tfk.runtime.model_server.grpc_client --address 127.0.0.1:8500 \\
        --model linear [--version 3 | --label stable] --saved-model DIR [--request FILE]

and reads one JSON answer on stdout (exit 1 and the gRPC status on stderr on failure).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


class GrpcPredictError(RuntimeError):
    pass


def signature_inputs(saved_model_dir: str, signature: str = "serving_default") -> dict[str, Any]:
    """Input name -> numpy dtype of a SavedModel's signature, from ``saved_model.pb``."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as fh:
        data = fh.read()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError
        raise GrpcPredictError(f"{saved_model_dir}/saved_model.pb is not a SavedModel: {exc}") from None
    for meta in proto.meta_graphs:
        if signature in meta.signature_def:
            inputs = meta.signature_def[signature].inputs
            return {k: tf.dtypes.as_dtype(v.dtype).as_numpy_dtype for k, v in inputs.items()}
    raise GrpcPredictError(f"{saved_model_dir} has no {signature} signature")


def _feeds(body: dict[str, Any], inputs: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Named numpy inputs of a REST body; True for the row ("instances") format."""
    import numpy as np

    row = "instances" in body
    data = body["instances" if row else "inputs"]
    names = sorted(inputs)
    feeds: dict[str, Any]
    if row and isinstance(data, list) and data and isinstance(data[0], dict):
        feeds = {n: [r.get(n) for r in data] for n in names}
    elif not row and isinstance(data, dict):
        feeds = {n: data.get(n) for n in names}
    elif len(names) == 1:
        feeds = {names[0]: data}
    else:
        raise GrpcPredictError(f"the signature takes inputs {names}; name them")
    return {n: np.asarray(v, dtype=inputs[n]) for n, v in feeds.items()}, row


def predict(
    address: str,
    model: str,
    body: dict[str, Any],
    inputs: dict[str, Any],
    *,
    version: int | None = None,
    label: str | None = None,
    timeout: float = 30.0,
    channel: Any = None,
) -> dict[str, Any]:
    """``PredictionService.Predict``; the answer in REST's shape (``predictions`` for rows,
    ``outputs`` for columns) plus ``model_version``, the version that answered."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    feeds, row = _feeds(body, inputs)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = "serving_default"
    if version is not None:
        request.model_spec.version.value = int(version)
    elif label is not None:
        request.model_spec.version_label = label
    for name, array in feeds.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(array))
    own = channel is None
    channel = channel or grpc.insecure_channel(address)
    try:
        reply = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise GrpcPredictError(f"gRPC Predict to {address}: {exc.code().name}: {exc.details()}") from None
    finally:
        if own:
            channel.close()
    arrays = {k: tf.make_ndarray(v).tolist() for k, v in reply.outputs.items()}
    answer: dict[str, Any]
    if not row:
        answer = {"outputs": next(iter(arrays.values())) if len(arrays) == 1 else arrays}
    elif len(arrays) == 1:
        answer = {"predictions": next(iter(arrays.values()))}
    else:
        rows = len(next(iter(arrays.values())))
        answer = {"predictions": [{k: v[i] for k, v in arrays.items()} for i in range(rows)]}
    answer["model_version"] = int(reply.model_spec.version.value)
    return answer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="gRPC Predict with a REST-shaped JSON body")
    p.add_argument("--address", required=True, help="HOST:PORT of the gRPC API")
    p.add_argument("--model", required=True)
    p.add_argument("--version", type=int)
    p.add_argument("--label")
    p.add_argument("--saved-model", required=True, help="a version directory (for the input names)")
    p.add_argument("--request", default="-", help="JSON body file ('-': stdin)")
    p.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args(argv)
    try:
        text = sys.stdin.read() if args.request == "-" else open(args.request, encoding="utf-8").read()
        answer = predict(
            args.address,
            args.model,
            json.loads(text),
            signature_inputs(args.saved_model),
            version=args.version,
            label=args.label,
            timeout=args.timeout,
        )
    except (GrpcPredictError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
