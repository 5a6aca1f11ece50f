"""A local stand-in for ``tensorflow_model_server``: the REST API subset that publishing
and clients use, served from SavedModels loaded in-process. Never imports Airflow.

Used by the local serving backend when ``tensorflow_model_server`` is not on PATH. Takes
the same flags and the same model config file, and answers like TF Serving::

    GET  /v1/models/NAME                       every version's model_version_status
    GET  /v1/models/NAME/versions/V            one version (AVAILABLE / LOADING / END,
                                               with error_code/error_message on a failed load)
    GET  /v1/models/NAME/labels/L              the version a label points to
    POST /v1/models/NAME[/versions/V|/labels/L]:predict   {"instances": [...]} or {"inputs": ...}

The config file is re-read when it changes (``--model_config_file_poll_wait_seconds``), and
version directories that appear later are picked up (``--file_system_poll_wait_seconds``).
As in TF Serving, a request without a version goes to the highest AVAILABLE version, and
a version dropped from the policy is unloaded (state END).

    python -m airflow_tfk.runtime.model_server --rest_api_port=8501 \\
        --model_config_file=models.config --model_config_file_poll_wait_seconds=1

Not implemented: gRPC (``--port`` is accepted and ignored), ``:classify``/``:regress``,
metadata, batching, and the ``latest``/``all`` policies beyond TF Serving's default.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from airflow_tfk.protocol.model_config import ConfigSyntaxError, ModelConfig, parse

BANNER = (
    "airflow-tfk local model server: a stand-in for tensorflow_model_server "
    "(REST only; SavedModels loaded in-process with tf.saved_model.load)"
)
_PATH = re.compile(
    r"^/v1/models/(?P<model>[^/:]+)"
    r"(?:/versions/(?P<version>-?\d+)|/labels/(?P<label>[^/:]+))?"
    r"(?P<verb>:predict)?$"
)


def _log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} model_server: {msg}", file=sys.stderr, flush=True)


class RequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Version:
    version: int
    path: str
    state: str = "START"
    error_code: str = "OK"
    error_message: str = ""
    fn: Any = None

    def status(self) -> dict[str, Any]:
        return {
            "version": str(self.version),
            "state": self.state,
            "status": {"error_code": self.error_code, "error_message": self.error_message},
        }


class ModelManager:
    """Keeps the loaded versions in line with the config, like TF Serving's manager."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.configs: dict[str, ModelConfig] = {}
        self.versions: dict[str, dict[int, _Version]] = {}

    # -- policy -------------------------------------------------------------------------
    def apply(self, configs: dict[str, ModelConfig]) -> None:
        with self.lock:
            for name in set(self.configs) - set(configs):
                for v in self.versions.get(name, {}).values():
                    self._unload(name, v)
            self.configs = dict(configs)
        self.reconcile()

    @staticmethod
    def _on_disk(base: str) -> list[int]:
        try:
            return sorted(
                int(d) for d in os.listdir(base) if d.isdigit() and os.path.isdir(os.path.join(base, d))
            )
        except OSError:
            return []

    def reconcile(self) -> None:
        """Load aspired versions that exist on disk; unload versions no longer aspired."""
        starts = []
        with self.lock:
            for name, cfg in self.configs.items():
                present = self._on_disk(cfg.base_path)
                aspired = [v for v in cfg.versions if v in present] if cfg.versions else present[-1:]
                known = self.versions.setdefault(name, {})
                for v, ver in list(known.items()):
                    if v not in aspired and ver.state != "END":
                        self._unload(name, ver)
                for v in aspired:
                    ver = known.get(v)
                    if ver is None or (ver.state == "END" and ver.error_code == "OK"):
                        # a new version, or one unloaded earlier and aspired again
                        ver = known[v] = _Version(v, os.path.join(cfg.base_path, str(v)), state="LOADING")
                        starts.append((name, ver))
        for name, ver in starts:
            threading.Thread(
                target=self._load, args=(name, ver), daemon=True, name=f"load-{name}-{ver.version}"
            ).start()

    def _unload(self, name: str, ver: _Version) -> None:
        if ver.state != "END":
            _log(f"unloading {name} version {ver.version}")
        ver.state, ver.fn = "END", None

    def _load(self, name: str, ver: _Version) -> None:
        _log(f"loading {name} version {ver.version} from {ver.path}")
        try:
            import tensorflow as tf

            loaded = tf.saved_model.load(ver.path)
            signatures = getattr(loaded, "signatures", {}) or {}
            if "serving_default" not in signatures:
                raise ValueError(
                    f"the SavedModel at {ver.path} has no serving_default "
                    f"signature (has {sorted(signatures)})"
                )
            fn = signatures["serving_default"]
        except Exception as exc:
            with self.lock:
                ver.state, ver.error_code = "END", _error_code(exc)
                ver.error_message = f"{type(exc).__name__}: {exc}"[:2000]
            _log(f"failed to load {name} version {ver.version}: {ver.error_message}")
            return
        with self.lock:
            if ver.state != "LOADING":  # unloaded while it was loading
                return
            ver.fn, ver.state = fn, "AVAILABLE"
            ver.__dict__["loaded_object"] = loaded  # keep the variables alive
        _log(f"{name} version {ver.version} is AVAILABLE")

    # -- queries ------------------------------------------------------------------------
    def statuses(
        self, name: str, version: int | None = None, label: str | None = None
    ) -> list[dict[str, Any]]:
        with self.lock:
            known = self.versions.get(name) or {}
            if label is not None:
                version = self._label(name, label)
            if version is not None:
                if version not in known:
                    raise RequestError(404, f"Could not find version {version} of model {name}")
                return [known[version].status()]
            if not known:
                raise RequestError(404, f"Could not find any versions of model {name}")
            return [known[v].status() for v in sorted(known, reverse=True)]

    def _label(self, name: str, label: str) -> int:
        cfg = self.configs.get(name)
        if cfg is None or label not in cfg.labels:
            raise RequestError(404, f"Unrecognized servable version label: {label}")
        return cfg.labels[label]

    def servable(self, name: str, version: int | None, label: str | None) -> Any:
        with self.lock:
            known = self.versions.get(name) or {}
            if label is not None:
                version = self._label(name, label)
            if version is None:
                available = [v for v, x in known.items() if x.state == "AVAILABLE"]
                if not available:
                    raise RequestError(404, f"Servable not found for request: Latest({name})")
                version = max(available)
            ver = known.get(version)
            if ver is None or ver.state != "AVAILABLE":
                raise RequestError(404, f"Servable not found for request: Specific({name}, {version})")
            return ver.fn


def _error_code(exc: BaseException) -> str:
    name = type(exc).__name__
    return {
        "NotFoundError": "NOT_FOUND",
        "InvalidArgumentError": "INVALID_ARGUMENT",
        "DataLossError": "DATA_LOSS",
        "FileNotFoundError": "NOT_FOUND",
        "OSError": "NOT_FOUND",
        "ValueError": "INVALID_ARGUMENT",
    }.get(name, "UNKNOWN")


def run_signature(fn: Any, body: Any) -> dict[str, Any]:
    """Run a serving signature on a REST predict body (row or columnar format)."""
    import numpy as np
    import tensorflow as tf

    if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
        raise RequestError(400, "JSON object must have exactly one of 'instances' or 'inputs'")
    _, specs = fn.structured_input_signature
    names = sorted(specs)
    row = "instances" in body
    data = body["instances" if row else "inputs"]
    if row and not (isinstance(data, list) and data):
        raise RequestError(400, "'instances' must be a non-empty list")
    if row and isinstance(data[0], dict):
        feeds = {n: [r.get(n) for r in data] for n in names}
    elif not row and isinstance(data, dict):
        feeds = {n: data.get(n) for n in names}
    elif len(names) == 1:
        feeds = {names[0]: data}
    else:
        raise RequestError(400, f"the signature takes inputs {names}; name them")
    try:
        tensors = {}
        for n in names:
            if feeds[n] is None or (isinstance(feeds[n], list) and None in feeds[n]):
                raise RequestError(400, f"missing input '{n}'")
            tensors[n] = tf.constant(np.asarray(feeds[n]), dtype=specs[n].dtype)
        outputs = fn(**tensors)
    except RequestError:
        raise
    except Exception as exc:  # TF's own errors, shape/dtype mismatches
        raise RequestError(400, f"{type(exc).__name__}: {exc}"[:2000]) from None
    arrays = {k: v.numpy().tolist() for k, v in outputs.items()}
    arrays = {
        k: [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
        if isinstance(v, list)
        else v
        for k, v in arrays.items()
    }
    if not row:
        return {"outputs": next(iter(arrays.values())) if len(arrays) == 1 else arrays}
    if len(arrays) == 1:
        return {"predictions": next(iter(arrays.values()))}
    rows = len(next(iter(arrays.values())))
    return {"predictions": [{k: v[i] for k, v in arrays.items()} for i in range(rows)]}


class _Handler(BaseHTTPRequestHandler):
    manager: ModelManager
    protocol_version = "HTTP/1.1"
    server_version = "airflow-tfk-model-server"

    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, indent=1).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        m = _PATH.match(path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            if not m or (method == "POST") != bool(m.group("verb")):
                raise RequestError(404, f"Malformed request: {method} {path}")
            name, label = m.group("model"), m.group("label")
            version = int(m.group("version")) if m.group("version") else None
            if method == "GET":
                return self._send(200, {"model_version_status": self.manager.statuses(name, version, label)})
            fn = self.manager.servable(name, version, label)
            try:
                body = json.loads(raw or b"null")
            except ValueError as exc:
                raise RequestError(400, f"JSON Parse error: {exc}") from None
            return self._send(200, run_signature(fn, body))
        except RequestError as exc:
            return self._send(exc.status, {"error": str(exc)})
        except Exception as exc:  # never let one request kill the server
            return self._send(500, {"error": f"{type(exc).__name__}: {exc}"})

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")


def _poll(
    manager: ModelManager, config_file: str, config_wait: float, fs_wait: float, stop: threading.Event
) -> None:
    last: str | None = None
    next_fs = 0.0
    while not stop.is_set():
        text = None
        if last is None or config_wait > 0:  # 0 = read once, as TF Serving does
            try:
                with open(config_file, encoding="utf-8") as fh:
                    text = fh.read()
            except OSError as exc:
                _log(f"cannot read {config_file}: {exc}")
        if text is not None and text != last:
            try:
                config = parse(text)
                manager.apply({m.name: m for m in config.models})
                _log(
                    "config: "
                    + "; ".join(
                        f"{m.name} versions={list(m.versions) or 'latest'} labels={dict(m.labels)}"
                        for m in config.models
                    )
                )
            except ConfigSyntaxError as exc:
                _log(f"ignoring unreadable config {config_file}: {exc}")
            last = text
        elif time.monotonic() >= next_fs:
            manager.reconcile()
            next_fs = time.monotonic() + fs_wait
        stop.wait(min(config_wait if config_wait > 0 else fs_wait, fs_wait))


def _warm_up() -> None:
    try:
        import tensorflow  # noqa: F401
    except Exception as exc:  # the loads will report it per version
        _log(f"cannot import tensorflow: {exc}")


def serve(
    config_file: str,
    rest_port: int,
    host: str = "127.0.0.1",
    config_wait: float = 1.0,
    fs_wait: float = 1.0,
    ready: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> None:
    manager = ModelManager()
    stop = stop or threading.Event()

    class Handler(_Handler):
        pass

    Handler.manager = manager
    server = ThreadingHTTPServer((host, rest_port), Handler)
    server.daemon_threads = True
    _log(BANNER)
    _log(f"REST API at http://{host}:{server.server_address[1]}, config {config_file}")
    poller = threading.Thread(
        target=_poll, args=(manager, config_file, config_wait, fs_wait, stop), daemon=True, name="config-poll"
    )
    poller.start()
    # TensorFlow takes seconds to import: start now, so the first load does not wait as long.
    threading.Thread(target=_warm_up, daemon=True, name="import-tensorflow").start()
    threading.Thread(target=lambda: (stop.wait(), server.shutdown()), daemon=True).start()
    if ready is not None:
        ready.set()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        stop.set()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=BANNER)
    p.add_argument("--port", type=int, default=8500, help="gRPC port (accepted, not served)")
    p.add_argument("--rest_api_port", type=int, default=8501)
    p.add_argument("--rest_api_host", default="127.0.0.1")
    p.add_argument("--model_config_file", required=True)
    p.add_argument("--model_config_file_poll_wait_seconds", type=float, default=0.0)
    p.add_argument("--file_system_poll_wait_seconds", type=float, default=1.0)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        _log(f"ignoring flags the stand-in does not implement: {' '.join(unknown)}")
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
    )
    _log("stopped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
