"""The gRPC API of the stand-in: ``PredictionService.Predict`` and
``ModelService.GetModelStatus`` from the official ``tensorflow-serving-api`` protos, so
clients written for TF Serving (``PredictionServiceStub``) talk to it unchanged.

Imports TensorFlow (the protos' TensorProto is TensorFlow's): the runtime side only.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_tfk.runtime.model_server.limits import Limits, declared_bytes
from airflow_tfk.runtime.model_server.manager import ModelManager, RequestError
from airflow_tfk.runtime.model_server.metrics import Metrics
from airflow_tfk.runtime.model_server.signature import run_arrays

SIGNATURE = "serving_default"


def _abort(context: Any, exc: RequestError) -> None:
    import grpc

    code = getattr(grpc.StatusCode, exc.code, grpc.StatusCode.INTERNAL)
    context.abort(code, str(exc))


def _declared(inputs: Any, limit: int) -> int:
    """Bytes the TensorProtos declare, checked against ``limit`` before any array is made:
    a proto's shape, not its wire size, decides what decoding it allocates (a single value
    is repeated to fill the shape)."""
    import tensorflow as tf

    total = 0
    for name, proto in inputs.items():
        try:
            dtype = tf.dtypes.as_dtype(proto.dtype)
        except TypeError:
            raise RequestError(400, f"input '{name}' has an unknown dtype {proto.dtype}") from None
        if proto.tensor_shape.unknown_rank:
            raise RequestError(400, f"input '{name}' has no shape")
        dims = [d.size for d in proto.tensor_shape.dim]
        itemsize = dtype.size or 8  # strings: at least a pointer each
        size = declared_bytes(name, dims, itemsize, limit - total)
        if proto.tensor_content and dtype.size and len(proto.tensor_content) != size // itemsize * dtype.size:
            raise RequestError(
                400,
                f"input '{name}': tensor_content holds {len(proto.tensor_content)} bytes, not the shape's",
            )
        total += size
    return total


class _Servicers:
    def __init__(self, manager: ModelManager, metrics: Metrics, limits: Limits) -> None:
        self.manager = manager
        self.metrics = metrics
        self.limits = limits

    @staticmethod
    def _which(spec: Any) -> tuple[int | None, str | None]:
        which = spec.WhichOneof("version_choice")
        if which == "version":
            return int(spec.version.value), None
        if which == "version_label":
            return None, spec.version_label or None
        return None, None

    def predict(self, request: Any, context: Any) -> Any:
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        start = time.perf_counter()
        name = request.model_spec.name
        try:
            if request.model_spec.signature_name not in ("", SIGNATURE):
                raise RequestError(
                    400, f"signature {request.model_spec.signature_name!r} is not served (only {SIGNATURE})"
                )
            version, label = self._which(request.model_spec)
            resolved, fn = self.manager.resolve(name, version, label)
            limit = self.limits.max_request_bytes
            size = max(request.ByteSize(), _declared(request.inputs, limit))
            with self.limits.hold(size, "the request"):
                try:
                    feeds = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
                except Exception as exc:  # a malformed TensorProto
                    raise RequestError(400, f"cannot decode the inputs: {exc}"[:2000]) from None
                outputs = run_arrays(fn, feeds, limit)
                del feeds
            wanted = list(request.output_filter) or sorted(outputs)
            missing = [k for k in wanted if k not in outputs]
            if missing:
                raise RequestError(400, f"output_filter names unknown outputs {missing}")
            response = predict_pb2.PredictResponse()
            response.model_spec.name = name
            response.model_spec.version.value = resolved
            response.model_spec.signature_name = SIGNATURE
            for key in wanted:
                response.outputs[key].CopyFrom(tf.make_tensor_proto(outputs[key]))
        except RequestError as exc:
            self.metrics.observe(name, "predict", "GRPC", exc.code, time.perf_counter() - start)
            _abort(context, exc)
            raise AssertionError("unreachable") from None  # abort raises
        self.metrics.observe(name, "predict", "GRPC", "OK", time.perf_counter() - start)
        return response

    def get_model_status(self, request: Any, context: Any) -> Any:
        from tensorflow.core.protobuf import error_codes_pb2
        from tensorflow_serving.apis import get_model_status_pb2

        start = time.perf_counter()
        name = request.model_spec.name
        try:
            version, label = self._which(request.model_spec)
            entries = self.manager.statuses(name, version, label)
        except RequestError as exc:
            self.metrics.observe(name, "GetModelStatus", "GRPC", exc.code, time.perf_counter() - start)
            _abort(context, exc)
            raise AssertionError("unreachable") from None
        response = get_model_status_pb2.GetModelStatusResponse()
        states = get_model_status_pb2.ModelVersionStatus.State
        for entry in entries:
            status = response.model_version_status.add()
            status.version = int(entry["version"])
            status.state = states.Value(entry["state"]) if entry["state"] in states.keys() else 0
            code = entry["status"]["error_code"]
            status.status.error_code = (
                error_codes_pb2.Code.Value(code) if code in error_codes_pb2.Code.keys() else 2  # UNKNOWN
            )
            status.status.error_message = entry["status"]["error_message"]
        self.metrics.observe(name, "GetModelStatus", "GRPC", "OK", time.perf_counter() - start)
        return response


def start_grpc(
    manager: ModelManager, metrics: Metrics, host: str, port: int, workers: int, limits: Limits | None = None
) -> tuple[Any, int]:
    """A started gRPC server and the port it bound (``port`` 0: a free one)."""
    limits = limits or Limits()
    import grpc
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    servicers = _Servicers(manager, metrics, limits)

    class Prediction(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request: Any, context: Any) -> Any:  # the proto's name
            return servicers.predict(request, context)

    class Models(model_service_pb2_grpc.ModelServiceServicer):
        def GetModelStatus(self, request: Any, context: Any) -> Any:
            return servicers.get_model_status(request, context)

    # A message is read whole before its handler runs: the receive limit bounds each one,
    # and maximum_concurrent_rpcs how many wait for a thread (the rest: RESOURCE_EXHAUSTED).
    wire = limits.max_request_bytes + (1 << 20)  # room for the proto's own fields
    server = grpc.server(
        ThreadPoolExecutor(workers, thread_name_prefix="grpc"),
        options=[
            ("grpc.max_receive_message_length", wire),
            ("grpc.max_send_message_length", 4 * wire),
            ("grpc.max_metadata_size", 16 << 10),
            ("grpc.so_reuseport", 0),
        ],
        maximum_concurrent_rpcs=workers * 16,
    )
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Prediction(), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(Models(), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind the gRPC port {host}:{port}")
    server.start()
    return server, bound
