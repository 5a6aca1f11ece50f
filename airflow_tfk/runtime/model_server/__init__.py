"""A local stand-in for ``tensorflow_model_server``: the REST and gRPC subset that
publishing and clients use, served from SavedModels loaded in-process. Never imports
Airflow.

Used by the local serving backend when ``tensorflow_model_server`` is not on PATH. Takes
the same flags and the same model config file, and answers like TF Serving::

    GET  /v1/models/NAME                       every version's model_version_status
    GET  /v1/models/NAME/versions/V            one version (AVAILABLE / LOADING / END,
                                               with error_code/error_message on a failed load)
    GET  /v1/models/NAME/labels/L              the version a label points to
    POST /v1/models/NAME[/versions/V|/labels/L]:predict   {"instances": [...]} or {"inputs": ...}
    GET  /monitoring/prometheus/metrics        request counts and latencies (Prometheus text)

    gRPC (--port): tensorflow.serving.PredictionService/Predict and
                   tensorflow.serving.ModelService/GetModelStatus, with the official
                   tensorflow-serving-api protos

The config file is re-read when it changes (``--model_config_file_poll_wait_seconds``), and
version directories that appear later are picked up (``--file_system_poll_wait_seconds``);
names that are not base-10 integers are skipped, as TF Serving skips them. As in TF
Serving, a request without a version goes to the highest AVAILABLE version, and a version
dropped from the policy is unloaded (state END).

    python -m airflow_tfk.runtime.model_server --port=8500 --rest_api_port=8501 \\
        --model_config_file=models.config --model_config_file_poll_wait_seconds=1

Not implemented: ``:classify``/``:regress``, metadata, batching (``--enable_batching`` is
accepted and ignored: every request runs on its own), and the ``latest``/``all`` policies
beyond TF Serving's default.
"""

from __future__ import annotations

import argparse
import re
import signal
import threading
from typing import Any

from airflow_tfk.runtime.model_server.manager import ModelManager, RequestError, log, poll, version_dirs
from airflow_tfk.runtime.model_server.metrics import Metrics
from airflow_tfk.runtime.model_server.rest import DEFAULT_METRICS_PATH, ServerOptions, make_server
from airflow_tfk.runtime.model_server.signature import run_signature

__all__ = ["ModelManager", "RequestError", "main", "run_signature", "serve", "version_dirs"]

BANNER = (
    "airflow-tfk local model server: a stand-in for tensorflow_model_server "
    "(REST and gRPC; SavedModels loaded in-process with tf.saved_model.load)"
)


def _warm_up() -> None:
    try:
        import tensorflow  # noqa: F401
    except Exception as exc:  # the loads will report it per version
        log(f"cannot import tensorflow: {exc}")


def metrics_path(monitoring_config_file: str | None) -> str:
    """The Prometheus path of a TF Serving monitoring config (``prometheus_config``)."""
    if not monitoring_config_file:
        return DEFAULT_METRICS_PATH
    with open(monitoring_config_file, encoding="utf-8") as fh:
        text = fh.read()
    m = re.search(r"""\bpath\s*:\s*["']([^"']+)["']""", text)
    return m.group(1) if m else DEFAULT_METRICS_PATH


def serve(
    config_file: str,
    rest_port: int,
    host: str = "127.0.0.1",
    config_wait: float = 1.0,
    fs_wait: float = 1.0,
    ready: threading.Event | None = None,
    stop: threading.Event | None = None,
    *,
    grpc_port: int = -1,
    options: ServerOptions | None = None,
    bound: dict[str, int] | None = None,
) -> None:
    """Serve until ``stop`` is set. ``bound`` (if given) receives the ports actually bound
    (``rest``, ``grpc``), useful with port 0."""
    manager = ModelManager()
    metrics = Metrics()
    options = options or ServerOptions()
    limits = options.limits()
    stop = stop or threading.Event()
    # gRPC first, as tensorflow_model_server does: whoever waits for the REST port to
    # listen then knows the gRPC port is settled (bound, or off); a gRPC port that cannot
    # be bound ends the server before REST ever listens.
    grpc_server: Any = None
    if grpc_port >= 0:
        try:
            from airflow_tfk.runtime.model_server.grpc_api import start_grpc

            grpc_server, grpc_port = start_grpc(manager, metrics, host, grpc_port, options.workers, limits)
        except ImportError as exc:  # REST still works; say why gRPC does not
            log(f"gRPC API off: {exc} (scripts/bootstrap.sh installs tensorflow-serving-api)")
    try:
        server = make_server(manager, metrics, host, rest_port, options, limits)
    except BaseException:
        if grpc_server is not None:
            grpc_server.stop(grace=0)
        raise
    if bound is not None:
        bound.update(rest=server.server_address[1], grpc=grpc_port)
    log(BANNER)
    log(
        f"REST API at http://{host}:{server.server_address[1]}"
        + (f", gRPC at {host}:{grpc_port}" if grpc_server is not None else "")
        + f", metrics at {options.metrics_path}, config {config_file}"
    )
    poller = threading.Thread(
        target=poll, args=(manager, config_file, config_wait, fs_wait, stop), daemon=True, name="config-poll"
    )
    poller.start()
    # TensorFlow takes seconds to import: start now, so the first load does not wait as long.
    threading.Thread(target=_warm_up, daemon=True, name="import-tensorflow").start()

    def shutdown_on_stop() -> None:
        stop.wait()
        server.shutdown()

    threading.Thread(target=shutdown_on_stop, daemon=True, name="shutdown").start()
    if ready is not None:
        ready.set()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        stop.set()
        server.server_close()
        if grpc_server is not None:
            grpc_server.stop(grace=1.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=BANNER)
    p.add_argument("--port", type=int, default=8500, help="gRPC port (0: any free port; -1: no gRPC)")
    p.add_argument("--rest_api_port", type=int, default=8501)
    # TF Serving listens on every interface, and a pod must: the kubelet's probes and the
    # API server's service proxy connect to the pod IP. The local backend asks for loopback.
    p.add_argument("--rest_api_host", default="0.0.0.0", help="address of REST and gRPC (default: all)")
    p.add_argument("--rest_api_num_threads", type=int, default=16, help="size of the worker pool")
    p.add_argument("--rest_api_timeout_in_ms", type=int, default=10_000, help="read timeout of a request")
    p.add_argument(
        "--rest_api_max_body_bytes",
        type=int,
        default=64 << 20,
        help="largest REST body and gRPC message, and the most input bytes a request may declare",
    )
    p.add_argument(
        "--max_inflight_bytes",
        type=int,
        default=0,
        help="bytes of requests decoded at once (default: the body limit)",
    )
    p.add_argument(
        "--rest_api_header_timeout_in_ms",
        type=int,
        default=10_000,
        help="time for a request head to arrive whole (and idle time between keep-alive requests)",
    )
    p.add_argument("--rest_api_max_connections", type=int, default=1024, help="open REST connections in all")
    p.add_argument(
        "--rest_api_max_pending_per_client",
        type=int,
        default=64,
        help="connections of one client address waiting for their request head",
    )
    p.add_argument("--model_config_file", required=True)
    p.add_argument("--model_config_file_poll_wait_seconds", type=float, default=0.0)
    p.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0)
    p.add_argument("--monitoring_config_file", default=None)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        log(f"ignoring flags the stand-in does not implement: {' '.join(unknown)}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    serve(
        args.model_config_file,
        args.rest_api_port,
        args.rest_api_host,
        args.model_config_file_poll_wait_seconds,
        args.file_system_poll_wait_seconds,
        stop=stop,
        grpc_port=args.port,
        options=ServerOptions(
            workers=max(1, args.rest_api_num_threads),
            read_timeout=max(0.1, args.rest_api_timeout_in_ms / 1000.0),
            max_body_bytes=max(1, args.rest_api_max_body_bytes),
            metrics_path=metrics_path(args.monitoring_config_file),
            inflight_bytes=args.max_inflight_bytes or None,
            header_timeout=max(0.1, args.rest_api_header_timeout_in_ms / 1000.0),
            max_connections=max(1, args.rest_api_max_connections),
            max_pending_per_client=max(1, args.rest_api_max_pending_per_client),
        ),
    )
    log("stopped")
    return 0
