"""The stand-in's ``/metadata`` path, which the serving Deployment's readiness probe asks:
404 while the model (or its label's version) is not AVAILABLE, 200 once it is, as TF
Serving answers it. The REST server runs for real; the loaded version is a plain
function with a signature, so no TensorFlow is imported."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from airflow_tfk.protocol.model_config import ModelConfig
from airflow_tfk.runtime.model_server.manager import ModelManager, Version
from airflow_tfk.runtime.model_server.metrics import Metrics
from airflow_tfk.runtime.model_server.rest import ServerOptions, make_server
from airflow_tfk.serving._http import request_json


class _Spec:
    dtype = SimpleNamespace(name="float32")
    shape = SimpleNamespace(as_list=lambda: [None, 2])


def _fn() -> object:
    return SimpleNamespace(structured_input_signature=((), {"x": _Spec()}))


@pytest.fixture
def served() -> Iterator[tuple[str, ModelManager]]:
    manager = ModelManager()
    # a config with the promoted version labelled, as a publish leaves it; nothing loaded
    manager.configs = {"m": ModelConfig("m", "/nowhere", versions=(3,), labels={"stable": 3})}
    options = ServerOptions(workers=2)
    server = make_server(manager, Metrics(), "127.0.0.1", 0, options, options.limits())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", manager
    finally:
        server.shutdown()
        server.server_close()


def _load(manager: ModelManager, version: int, state: str) -> None:
    with manager.lock:
        manager.versions.setdefault("m", {})[version] = Version(
            version, f"/nowhere/{version}", state=state, fn=_fn() if state == "AVAILABLE" else None
        )


PROBE = "/v1/models/m/labels/stable/metadata"


def test_metadata_is_404_until_the_labelled_version_is_available_then_200(served) -> None:
    url, manager = served
    status, body = request_json("GET", url + PROBE)
    assert status == 404 and "Could not find version 3 of model m" in body["error"]
    _load(manager, 3, "LOADING")
    status, body = request_json("GET", url + PROBE)
    assert status == 404 and "LOADING" in body["error"]
    # the model status answers 200 while it loads: it cannot tell readiness
    assert request_json("GET", url + "/v1/models/m/labels/stable")[0] == 200
    _load(manager, 3, "AVAILABLE")
    status, body = request_json("GET", url + PROBE)
    assert status == 200
    assert body["model_spec"] == {"name": "m", "signature_name": "", "version": "3"}
    sig = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["inputs"] == {"x": {"dtype": "float32", "shape": [None, 2]}}


def test_metadata_of_an_unknown_label_model_or_version_is_404(served) -> None:
    url, manager = served
    _load(manager, 3, "AVAILABLE")
    assert request_json("GET", url + "/v1/models/m/metadata")[0] == 200
    assert request_json("GET", url + "/v1/models/m/versions/3/metadata")[0] == 200
    assert request_json("GET", url + "/v1/models/m/versions/4/metadata")[0] == 404
    assert request_json("GET", url + "/v1/models/m/labels/canary/metadata")[0] == 404
    assert request_json("GET", url + "/v1/models/other/metadata")[0] == 404
    # metadata is read, never posted to
    assert request_json("POST", url + "/v1/models/m/metadata", {})[0] == 404
