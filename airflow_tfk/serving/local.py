"""Local serving: one model server process per model, on 127.0.0.1.

``tensorflow_model_server`` when it is on PATH, otherwise the stand-in
:mod:`airflow_tfk.runtime.model_server` (same flags, same model config file, same REST
API); the log says which. The process outlives the task that started it, like a
Deployment, and is found again through its record on disk::

    <root>/<namespace>/.serving/<name>/
        models.config   the model config file the server polls (written atomically)
        server.json     pid, create time, ports, which server
        server.log      the server's output

The model store is ``<root>/<namespace>/.claims/<claim>/<sub_path>`` (the local backend's
stand-in for a PVC) or ``base_path``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from airflow_tfk.core import processes as _process
from airflow_tfk.core.kwargs import init_kwargs
from airflow_tfk.core.local_env import default_local_root as default_root
from airflow_tfk.protocol.digits import model_version
from airflow_tfk.protocol.model_config import ModelServerConfig, parse
from airflow_tfk.serving._http import request_json
from airflow_tfk.serving.base import Emit, PredictError, ServingError, ServingTarget
from airflow_tfk.serving.files import MAX_STORE_JSON
from airflow_tfk.serving.spec import (
    CONFIG_FILE,
    PUBLISHED_METRICS,
    ServingSpec,
    TensorBoardSpec,
    batching_text,
    monitoring_text,
)

TF_SERVING_BINARY = "tensorflow_model_server"
SAMPLE_REQUEST = os.path.join("assets.extra", "tfk_sample_request.json")
METRICS_FILE = os.path.join("assets.extra", "tfk_metrics.json")  # runtime.app.METRICS_FILE


S = TypeVar("S", ServingSpec, TensorBoardSpec)


class LocalServer(Generic[S]):
    """What the local model server and the local TensorBoard share: the local root, the
    server's directory ``<root>/<namespace>/<folder>/<name>/`` with its process record
    (:class:`~airflow_tfk.core.processes.ServerDir`), and the directory behind the spec's claim."""

    def __init__(self, spec: S, root: str | None, folder: str, start_timeout_seconds: float) -> None:
        self.spec: S = spec
        self.root = os.path.abspath(os.path.expanduser(root or default_root()))
        self.start_timeout_seconds = float(start_timeout_seconds)
        self.dir = Path(self.root, spec.namespace, folder, spec.name or "")
        self.process = _process.ServerDir(self.dir)

    def config(self) -> dict[str, Any]:
        return init_kwargs(self, skip=("spec",))

    def _start_once(
        self, emit: Emit, already: Callable[[dict[str, Any]], str], launch: Callable[[], None]
    ) -> None:
        """Under the server directory's lock (two tasks may start the same server): say
        ``already(record)`` if the recorded server still runs, else ``launch()`` it."""
        with _process.locked(self.dir):
            record = self.process.running()
            if record is not None:
                emit(already(record))
            else:
                launch()

    def _launch_on_free_ports(self, emit: Emit, launch: Callable[[bool], None], attempts: int = 3) -> None:
        """``launch(retry)``, again (``retry`` True) when another process took a port between
        the choice and the bind: a free port is only free until someone binds it."""
        for attempt in range(attempts):
            try:
                launch(attempt > 0)
                return
            except _process.PortTaken as exc:
                if attempt == attempts - 1:
                    raise
                emit(f"{exc}; starting {self.spec.name} again on another port")

    def store(self) -> str:
        """The local directory behind the spec's claim (or its explicit base path)."""
        spec = self.spec
        if spec.base_path is not None:
            return os.path.abspath(os.path.expanduser(spec.base_path))
        return os.path.join(self.root, spec.namespace, ".claims", spec.claim or "", spec.sub_path).rstrip("/")


class LocalServing(LocalServer[ServingSpec], ServingTarget):
    """:param root: the local backend's root (default: :func:`airflow_tfk.core.local_env.default_local_root`).
    :param poll_seconds: config and file-system poll of the server (local default: 1 s).
    :param server: ``auto`` (``tensorflow_model_server`` if on PATH), ``tensorflow_model_server``
        or ``stand-in``.
    :param start_timeout_seconds: how long the server may take to listen.
    """

    kind = "local"
    status_timeout = 5.0
    restartable = True

    def __init__(
        self,
        spec: ServingSpec,
        root: str | None = None,
        *,
        poll_seconds: int = 1,
        server: str = "auto",
        start_timeout_seconds: float = 60.0,
    ) -> None:
        if server not in ("auto", "tensorflow_model_server", "stand-in"):
            raise ValueError(f"server: must be auto, tensorflow_model_server or stand-in (got {server!r})")
        super().__init__(spec, root, ".serving", start_timeout_seconds)
        self.poll_seconds = int(poll_seconds)
        self.server = server
        self.config_path = self.dir / CONFIG_FILE

    # -- the store ------------------------------------------------------------------------
    def model_base_path(self) -> str:
        return os.path.join(self.store(), self.spec.model_name)

    def exported_versions(self) -> list[int]:
        base = self.model_base_path()
        try:
            names = os.listdir(base)
        except OSError:
            return []
        # base-10 ASCII names only, as TF Serving: str.isdigit() also accepts '²'
        found = ((model_version(d), d) for d in names)
        return sorted(
            v for v, d in found if v is not None and os.path.isfile(os.path.join(base, d, "saved_model.pb"))
        )

    def store_file(self, path: str, max_bytes: int) -> bytes:
        store = os.path.realpath(self.store())
        full = os.path.join(store, path)
        where = f"{path} in the model store {store}"
        if not os.path.realpath(full).startswith(store + os.sep):
            raise ServingError(f"{where} resolves outside the store (a link elsewhere)")
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as exc:
            raise ServingError(f"cannot read {where}: {exc.strerror or exc}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ServingError(f"{where} is not a regular file")
            if info.st_size > max_bytes:
                raise ServingError(f"{where} holds {info.st_size} bytes, more than {max_bytes}")
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(max_bytes + 1)
        finally:
            os.close(fd)
        if len(data) > max_bytes:
            raise ServingError(f"{where} grew past {max_bytes} bytes while it was read")
        return data

    def _json(self, path: str | Path, within: str | Path | None = None) -> Any:
        """A JSON file the training exported with a version, or None. The training wrote
        it, so it is read as data from a stranger: a regular file inside the model's
        folder (or ``within``) only (a FIFO would hang the publish, ``/dev/zero`` fill its
        memory, a link to a credentials file show that file as "metrics"), of at most
        :data:`MAX_STORE_JSON` bytes, and JSON nested too deeply is None as well."""
        base = os.path.realpath(within if within is not None else self.model_base_path())
        if not os.path.realpath(path).startswith(base + os.sep):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_STORE_JSON:
                return None
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read(MAX_STORE_JSON + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        try:
            return json.loads(data) if len(data) <= MAX_STORE_JSON else None
        except (ValueError, RecursionError):
            return None

    def sample_request(self, version: int) -> dict[str, Any] | None:
        found = self._json(os.path.join(self.model_base_path(), str(version), SAMPLE_REQUEST))
        return found if isinstance(found, dict) else None

    def version_metrics(self, version: int) -> dict[str, Any] | None:
        found = self._json(os.path.join(self.model_base_path(), str(version), METRICS_FILE))
        return found if isinstance(found, dict) else None

    def export_info(self, version: int) -> dict[str, Any] | None:
        from airflow_tfk.serving.compat import EXPORT_INFO_FILE

        found = self._json(os.path.join(self.model_base_path(), str(version), EXPORT_INFO_FILE))
        return found if isinstance(found, dict) else None

    def server_tensorflow(self) -> tuple[str | None, str]:
        """The TensorFlow of the server this target starts: ``tensorflow_model_server
        --version``'s library line, or the stand-in's (this Python's) installed one."""
        binary = shutil.which(TF_SERVING_BINARY) if self.server != "stand-in" else None
        if binary:
            return _binary_tensorflow(binary), f"the local {binary}"
        return _installed_tensorflow(), f"the local stand-in model server ({sys.executable})"

    def version_files(self, version: int) -> str | None:
        from airflow_tfk.serving.files import tree_digest

        return tree_digest(os.path.join(self.model_base_path(), str(version)))

    def published_metrics(self) -> dict[int, dict[str, Any]]:
        found = self._json(
            self.dir / PUBLISHED_METRICS, within=self.dir
        )  # beside the config, not in the store
        if not isinstance(found, dict):
            return {}
        return {int(k): v for k, v in found.items() if model_version(k) is not None and isinstance(v, dict)}

    def record_metrics(self, version: int, metrics: dict[str, Any]) -> None:
        with _process.locked(self.dir):
            recorded = {**self.published_metrics(), int(version): dict(metrics)}
            keep = sorted(recorded)[-50:]  # a bounded history; the serving one is the newest
            text = json.dumps({str(v): recorded[v] for v in keep}, indent=1, default=str)
            _process.write_atomic(self.dir / PUBLISHED_METRICS, text)

    # -- the server -----------------------------------------------------------------------
    def _argv(self, rest: int, grpc: int) -> tuple[list[str], str]:
        binary = shutil.which(TF_SERVING_BINARY) if self.server != "stand-in" else None
        if self.server == "tensorflow_model_server" and binary is None:
            raise FileNotFoundError(f"{TF_SERVING_BINARY} is not on PATH")
        flags = [
            f"--port={grpc}",
            f"--rest_api_port={rest}",
            f"--model_config_file={self.config_path}",
            f"--model_config_file_poll_wait_seconds={self.poll_seconds}",
            f"--file_system_poll_wait_seconds={self.poll_seconds}",
        ]
        if self.spec.monitoring:
            path = self.dir / "monitoring.config"
            _process.write_atomic(path, monitoring_text(self.spec.monitoring_path))
            flags.append(f"--monitoring_config_file={path}")
        if self.spec.batching is not None:
            path = self.dir / "batching.config"
            _process.write_atomic(path, batching_text(self.spec.batching))
            flags += ["--enable_batching=true", f"--batching_parameters_file={path}"]
        if binary:
            return [binary, *flags], TF_SERVING_BINARY
        # The stand-in listens on every interface by default, as TF Serving does (a pod
        # needs that); a local server stays on loopback.
        flags.append("--rest_api_host=127.0.0.1")
        return [sys.executable, "-m", "airflow_tfk.runtime.model_server", *flags], "stand-in"

    @staticmethod
    def _env() -> dict[str, str]:
        env = dict(os.environ)
        package_parent = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        return env

    def ensure(self, emit: Emit) -> None:
        self._start_once(
            emit,
            lambda record: (
                f"reusing the local model server of {self.spec.model_name} "
                f"({record['server']}, pid {record['pid']}) at {self.url}"
            ),
            lambda: self._launch_on_free_ports(emit, lambda retry: self._launch(emit)),
        )

    def _launch(self, emit: Emit) -> None:
        if not self.config_path.exists():
            _process.write_atomic(self.config_path, ModelServerConfig().to_text())
        rest, grpc = _process.reserve_ports(2)
        argv, which = self._argv(rest, grpc)
        proc, record = self.process.start(argv, self._env(), rest_port=rest, grpc_port=grpc, server=which)
        if which == TF_SERVING_BINARY:
            emit(
                f"serving {self.spec.model_name} with tensorflow_model_server "
                f"(pid {proc.pid}) at http://127.0.0.1:{rest}"
            )
        else:
            emit(
                f"serving {self.spec.model_name} with the local stand-in model server "
                f"(tensorflow_model_server is not on PATH; SavedModels loaded with "
                f"tf.saved_model.load in pid {proc.pid}) at http://127.0.0.1:{rest}"
            )
        # Both servers bind gRPC first: REST listening means gRPC is bound too, and a
        # gRPC port taken since it was chosen ends the server (PortTaken: a retry).
        self.process.wait_listening(proc, record, rest, self.start_timeout_seconds, others=(grpc,))

    @property
    def url(self) -> str:
        record = self._record()
        if not record:
            raise RuntimeError(
                f"no local model server for {self.spec.model_name} (nothing recorded in {self.dir})"
            )
        return f"http://127.0.0.1:{record['rest_port']}"

    def read_config(self) -> ModelServerConfig | None:
        try:
            return parse(self.config_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def write_config(self, config: ModelServerConfig) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        _process.write_atomic(self.config_path, config.to_text())

    def _rest(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
        url = self.url + path
        try:
            return request_json(method, url, body, timeout=timeout)
        except OSError as exc:
            raise OSError(f"{method} {url}: {exc}") from exc

    def _grpc_predict(
        self, body: dict[str, Any], version: int | None, label: str | None, timeout: float, model: str | None
    ) -> dict[str, Any]:
        # The gRPC protos import TensorFlow, which the provider never does: the runtime's
        # client runs in a child process and takes the input names from the SavedModel.
        record = self._record() or {}
        # the input names come from the version that will answer
        which = version if version is not None else self.label_version(label) if label else None
        if which is None:
            try:
                _, status = self._rest("GET", self._model_path(model=model), timeout=self.status_timeout)
                entries = status.get("model_version_status") or [] if isinstance(status, dict) else []
                which = max(int(e["version"]) for e in entries if e.get("state") == "AVAILABLE")
            except (OSError, ValueError, KeyError):
                raise PredictError(f"no AVAILABLE version of {model or self.spec.model_name}") from None
        saved = os.path.join(self.model_base_path(), str(which))
        if not os.path.isfile(os.path.join(saved, "saved_model.pb")):
            raise PredictError(
                f"version {which} of {self.spec.model_name} is not in the model store ({saved})"
            )
        argv = [
            sys.executable,
            "-m",
            "airflow_tfk.runtime.model_server.grpc_client",
            f"--address=127.0.0.1:{record.get('grpc_port')}",
            f"--model={model or self.spec.model_name}",
            f"--saved-model={saved}",
            f"--timeout={timeout}",
            *([f"--version={version}"] if version is not None else []),
            *([f"--label={label}"] if label else []),
        ]
        env = self._env()
        if self.process.tmp_dir.is_dir():
            # the server's $TMPDIR: what a client killed at the timeout leaves goes with it
            env["TMPDIR"] = str(self.process.tmp_dir)
        try:
            out = subprocess.run(
                argv,
                input=json.dumps(body),
                capture_output=True,
                text=True,
                timeout=timeout + 120,
                env=env,
            )
        except subprocess.TimeoutExpired as exc:
            raise PredictError(f"gRPC predict did not finish within {timeout + 120:.0f} s") from exc
        if out.returncode != 0:
            lines = [x for x in out.stderr.splitlines() if x.startswith("error:")] or out.stderr.splitlines()[
                -3:
            ]
            raise PredictError(" ".join(lines).removeprefix("error: ")[:2000] or "gRPC predict failed")
        try:
            answer = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise PredictError(f"gRPC predict printed no answer: {out.stdout[-300:]!r}") from exc
        return answer if isinstance(answer, dict) else {"predictions": answer}

    def endpoint(self, label: str | None = None) -> str:
        return self.url + self._model_path(label=label)

    def _record(self) -> dict[str, Any] | None:
        return self.process.record()

    def running(self) -> bool:
        return self.process.running() is not None

    def server_down(self) -> str | None:
        record = self._record()
        if record is None:
            return f"no local model server of {self.spec.model_name} is recorded in {self.dir}"
        if self.process.running() is not None:
            return None
        last = " | ".join(_process.tail(self.process.log_path, 2).splitlines())[-300:]
        return (
            f"the local model server of {self.spec.model_name} (pid {record.get('pid')}) is not "
            f"running; the end of its log: {last or '(empty)'}"
        )

    def delete(self, emit: Emit) -> None:
        with _process.locked(self.dir):
            record = self.process.stop()
        if record is not None:
            emit(f"stopped the local model server of {self.spec.model_name} (pid {record['pid']})")


#: the distributions that install the ``tensorflow`` package
TENSORFLOW_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-intel",
    "tf-nightly",
)


def _installed_tensorflow() -> str | None:
    """The installed TensorFlow's version, from its distribution's metadata (no import)."""
    for name in TENSORFLOW_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _binary_tensorflow(binary: str) -> str | None:
    """``TensorFlow Library: 2.21.0`` of ``tensorflow_model_server --version``, or None."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=20, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"TensorFlow Library:\s*(\S+)", out)
    return m.group(1) if m else None
