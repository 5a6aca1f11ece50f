"""Which versions of which models are loaded: TF Serving's manager, in miniature.

Keeps the loaded SavedModels in line with the model config (the ``specific`` version
policy, or the latest version) and the version directories on disk. Loads run on their
own threads; queries and loads share one lock. Never imports Airflow; TensorFlow is
imported by the first load.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.protocol.digits import model_version
from airflow_tfk.protocol.model_config import ConfigSyntaxError, ModelConfig, parse

# TF Serving parses a version directory's name as a base-10 int64 and skips every other
# entry. ``str.isdigit()`` is not that test: it accepts '²' or '٣', which int() then
# rejects (the bug that once killed the config-poll thread for good).


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} model_server: {msg}", file=sys.stderr, flush=True)


def version_dirs(base: str) -> list[int]:
    """The integer version directories under ``base``, ascending; others are skipped."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    found = ((model_version(d), d) for d in names)
    return sorted(v for v, d in found if v is not None and os.path.isdir(os.path.join(base, d)))


class RequestError(Exception):
    """A request the server answers with ``status`` (and, for gRPC, ``code``)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or {400: "INVALID_ARGUMENT", 404: "NOT_FOUND"}.get(status, "INTERNAL")


@dataclass
class Version:
    version: int
    path: str
    state: str = "START"
    error_code: str = "OK"
    error_message: str = ""
    fn: Any = None
    loaded: Any = field(default=None, repr=False)  # keeps the variables alive

    def status(self) -> dict[str, Any]:
        return {
            "version": str(self.version),
            "state": self.state,
            "status": {"error_code": self.error_code, "error_message": self.error_message},
        }


def _error_code(exc: BaseException) -> str:
    return {
        "NotFoundError": "NOT_FOUND",
        "InvalidArgumentError": "INVALID_ARGUMENT",
        "DataLossError": "DATA_LOSS",
        "FileNotFoundError": "NOT_FOUND",
        "OSError": "NOT_FOUND",
        "ValueError": "INVALID_ARGUMENT",
    }.get(type(exc).__name__, "UNKNOWN")


class ModelManager:
    """Keeps the loaded versions in line with the config, like TF Serving's manager."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.configs: dict[str, ModelConfig] = {}
        self.versions: dict[str, dict[int, Version]] = {}
        # aspired versions with no directory on disk, per model, so a request can say so
        self.missing: dict[str, list[int]] = {}

    # -- policy -------------------------------------------------------------------------
    def apply(self, configs: dict[str, ModelConfig]) -> None:
        with self.lock:
            for name in set(self.configs) - set(configs):
                for v in self.versions.get(name, {}).values():
                    self._unload(name, v)
            self.configs = dict(configs)
        self.reconcile()

    def reconcile(self) -> None:
        """Load aspired versions that exist on disk; unload versions no longer aspired."""
        starts = []
        with self.lock:
            for name, cfg in self.configs.items():
                present = version_dirs(cfg.base_path)
                aspired = [v for v in cfg.versions if v in present] if cfg.versions else present[-1:]
                missing = [v for v in cfg.versions if v not in present]
                if missing and missing != self.missing.get(name):
                    log(f"{name}: versions {missing} are in the version policy but not in {cfg.base_path}")
                self.missing[name] = missing
                known = self.versions.setdefault(name, {})
                for v, ver in list(known.items()):
                    if v not in aspired and ver.state != "END":
                        self._unload(name, ver)
                for v in aspired:
                    old = known.get(v)
                    if old is None or (old.state == "END" and old.error_code == "OK"):
                        # a new version, or one unloaded earlier and aspired again
                        new = known[v] = Version(v, os.path.join(cfg.base_path, str(v)), state="LOADING")
                        starts.append((name, new))
        for name, ver in starts:
            threading.Thread(
                target=self._load, args=(name, ver), daemon=True, name=f"load-{name}-{ver.version}"
            ).start()

    def _unload(self, name: str, ver: Version) -> None:
        if ver.state != "END":
            log(f"unloading {name} version {ver.version}")
        ver.state, ver.fn, ver.loaded = "END", None, None

    def _load(self, name: str, ver: Version) -> None:
        log(f"loading {name} version {ver.version} from {ver.path}")
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
            from airflow_tfk.runtime.model_server.warm import replay

            started = time.monotonic()
            warmed = replay(ver.path, fn)
            if warmed:
                log(
                    f"{name} version {ver.version}: warmed up with {warmed} request(s) "
                    f"in {time.monotonic() - started:.2f}s"
                )
        except Exception as exc:
            with self.lock:
                ver.state, ver.error_code = "END", _error_code(exc)
                ver.error_message = f"{type(exc).__name__}: {exc}"[:2000]
            log(f"failed to load {name} version {ver.version}: {ver.error_message}")
            return
        with self.lock:
            if ver.state != "LOADING":  # unloaded while it was loading
                return
            ver.fn, ver.loaded, ver.state = fn, loaded, "AVAILABLE"
        log(f"{name} version {ver.version} is AVAILABLE")

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
                    raise RequestError(404, self._why_missing(name, version))
                return [known[version].status()]
            if not known:
                raise RequestError(404, f"Could not find any versions of model {name}")
            return [known[v].status() for v in sorted(known, reverse=True)]

    def _why_missing(self, name: str, version: int) -> str:
        cfg = self.configs.get(name)
        if cfg is None:
            return f"Could not find version {version} of model {name}: no model {name} is configured"
        if version in self.missing.get(name, ()):
            return (
                f"Could not find version {version} of model {name}: it is in the version "
                f"policy but {os.path.join(cfg.base_path, str(version))} does not exist"
            )
        policy = list(cfg.versions) or "latest"
        return f"Could not find version {version} of model {name} (version policy: {policy})"

    def _label(self, name: str, label: str) -> int:
        cfg = self.configs.get(name)
        if cfg is None or label not in cfg.labels:
            raise RequestError(404, f"Unrecognized servable version label: {label}")
        return cfg.labels[label]

    def resolve(self, name: str, version: int | None, label: str | None) -> tuple[int, Any]:
        """(version, serving signature) a request goes to; 404 saying why when none."""
        with self.lock:
            known = self.versions.get(name) or {}
            if label is not None:
                version = self._label(name, label)
            if version is None:
                available = [v for v, x in known.items() if x.state == "AVAILABLE"]
                if not available:
                    states = ", ".join(f"{v} {x.state}" for v, x in sorted(known.items())) or "none"
                    raise RequestError(
                        404,
                        f"Servable not found for request: Latest({name}): no version is AVAILABLE ({states})",
                    )
                version = max(available)
            ver = known.get(version)
            if ver is None:
                raise RequestError(404, self._why_missing(name, version))
            if ver.state != "AVAILABLE":
                why = f"failed to load: {ver.error_code}" if ver.error_code != "OK" else ver.state
                raise RequestError(
                    404, f"Servable not found for request: Specific({name}, {version}): version {why}"
                )
            return version, ver.fn

    def metadata(self, name: str, version: int | None, label: str | None) -> dict[str, Any]:
        """``GET .../metadata``: the version a request would reach, and its signature; the
        same 404 as a predict while that version is not AVAILABLE (TF Serving answers it
        from the loaded servable too). A readiness probe on it passes only once the model
        serves."""
        version, fn = self.resolve(name, version, label)
        return {
            "model_spec": {"name": name, "signature_name": "", "version": str(version)},
            "metadata": {"signature_def": {"signature_def": {"serving_default": _signature(fn)}}},
        }


def _signature(fn: Any) -> dict[str, Any]:
    """The serving signature's input names, dtypes and shapes, as far as the loaded
    function tells them (a stand-in answer: TF Serving's carries the full SignatureDef)."""
    try:
        _, specs = fn.structured_input_signature
        return {
            "inputs": {
                k: {"dtype": getattr(getattr(v, "dtype", None), "name", None), "shape": _shape(v)}
                for k, v in specs.items()
            },
            "method_name": "tensorflow/serving/predict",
        }
    except Exception:  # the description is informative; the answer stands
        return {"method_name": "tensorflow/serving/predict"}


def _shape(spec: Any) -> list[int | None] | None:
    shape = getattr(spec, "shape", None)
    try:
        return None if shape is None else [d if d is None else int(d) for d in shape.as_list()]
    except Exception:  # an unknown rank
        return None


def poll(
    manager: ModelManager, config_file: str, config_wait: float, fs_wait: float, stop: threading.Event
) -> None:
    """Re-read the config when it changes and rescan the model directories, until ``stop``.

    Any error in one round is logged and the next round runs: a dead poll thread would
    leave the server deaf to every later publish.
    """
    last: str | None = None
    next_fs = 0.0
    while not stop.is_set():
        try:
            text = None
            if last is None or config_wait > 0:  # 0 = read once, as TF Serving does
                try:
                    with open(config_file, encoding="utf-8") as fh:
                        text = fh.read()
                except OSError as exc:
                    log(f"cannot read {config_file}: {exc}")
            if text is not None and text != last:
                last = text  # a bad config is reported once, not every round
                try:
                    config = parse(text)
                except ConfigSyntaxError as exc:
                    log(f"ignoring unreadable config {config_file}: {exc}")
                else:
                    manager.apply({m.name: m for m in config.models})
                    log(
                        "config: "
                        + "; ".join(
                            f"{m.name} versions={list(m.versions) or 'latest'} labels={dict(m.labels)}"
                            for m in config.models
                        )
                    )
            elif time.monotonic() >= next_fs:
                manager.reconcile()
                next_fs = time.monotonic() + fs_wait
        except Exception as exc:  # logged; the next round tries again
            log(f"config poll failed, retrying: {type(exc).__name__}: {exc}")
        stop.wait(min(config_wait if config_wait > 0 else fs_wait, fs_wait))
