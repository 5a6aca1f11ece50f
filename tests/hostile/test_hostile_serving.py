"""Hostile inputs to the serving path (issue 22: the quality gate, model versions, the
stand-in model server's requests), through every interface that reaches it:

* the Python API: ``QualityGate.from_dict`` and ``TFPublishModelOperator``;
* DAG-as-code folders: a training file's ``publish`` block, through ``airflow-tfk validate``;
* the UI form's conf: a training file whose gate and version come from ``params``,
  rendered with the submitted conf as Airflow renders it, then checked by the operator;
* the model server's own interfaces: REST and gRPC requests to the stand-in.

Each case is refused within 1 CPU-s and 100 MB naming the field (for a server request:
answered 4xx naming the input, with the server's CPU and RSS measured), or is accepted.
No traceback, no hang, nothing executed.
"""

from __future__ import annotations

import io
import json
import math
import socket
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.gate import QualityGate

from .corpus import bounded

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT = 1.0
MEMORY_LIMIT = 100 * 2**20
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Case:
    id: str
    value: Any
    field: str | None  # the field the error names; None: accepted


def _check(case: Case, fn) -> None:
    result, seconds, peak = bounded(fn)
    assert peak < MEMORY_LIMIT, f"{peak / 2**20:.0f} MB"
    assert seconds < 2 * TIME_LIMIT, seconds  # traced: about twice as slow
    if case.field is None:
        assert not isinstance(result, Exception), repr(result)[:500]
        return
    assert isinstance(result, SpecError), f"expected an error on {case.field}, got {result!r}"[:500]
    assert result.field == case.field or result.field.startswith(case.field + "."), str(result)[:300]
    assert len(str(result)) < 1000


# -- the quality gate (Python API) -------------------------------------------------------------
GATES = [
    Case("gate-regression-number-alone", {"max_regression": 0.01}, "quality_gate.max_regression"),
    Case("gate-regression-zero-alone", {"max_regression": 0}, "quality_gate.max_regression"),
    Case("gate-regression-empty-map", {"max_regression": {}}, "quality_gate.max_regression"),
    Case(
        "gate-empty-thresholds-number",
        {"thresholds": {}, "max_regression": 0.1},
        "quality_gate.max_regression",
    ),
    Case("gate-nothing", {}, "quality_gate"),
    Case("gate-only-on-failure", {"on_failure": "skip"}, "quality_gate"),
    Case("gate-only-lower", {"lower_is_better": ["loss"]}, "quality_gate"),
    Case(
        "gate-lower-unchecked",
        {"thresholds": {"acc": 0.9}, "lower_is_better": ["loss"]},
        "quality_gate.lower_is_better",
    ),
    Case(
        "gate-lower-string",
        {"thresholds": {"loss": 0.9}, "lower_is_better": "loss"},
        "quality_gate.lower_is_better",
    ),
    Case(
        "gate-lower-bytes",
        {"thresholds": {"loss": 0.9}, "lower_is_better": b"loss"},
        "quality_gate.lower_is_better",
    ),
    Case(
        "gate-lower-int",
        {"thresholds": {"loss": 0.9}, "lower_is_better": [1]},
        "quality_gate.lower_is_better",
    ),
    Case(
        "gate-lower-huge",
        {"thresholds": {"l": 1}, "lower_is_better": ["l"] * 10**6},
        "quality_gate.lower_is_better",
    ),
    Case("gate-nan", {"thresholds": {"acc": math.nan}}, "quality_gate.thresholds.acc"),
    Case("gate-inf", {"thresholds": {"acc": math.inf}}, "quality_gate.thresholds.acc"),
    Case("gate-neg-inf", {"thresholds": {"loss": -math.inf}}, "quality_gate.thresholds.loss"),
    Case("gate-bool", {"thresholds": {"acc": True}}, "quality_gate.thresholds.acc"),
    Case("gate-10e400", {"thresholds": {"acc": 10**400}}, "quality_gate.thresholds.acc"),
    Case("gate-string-number", {"thresholds": {"acc": "0.9"}}, "quality_gate.thresholds.acc"),
    Case("gate-none-number", {"thresholds": {"acc": None}}, "quality_gate.thresholds.acc"),
    Case(
        "gate-regression-10e400",
        {"thresholds": {"a": 1}, "max_regression": 10**400},
        "quality_gate.max_regression",
    ),
    Case(
        "gate-regression-nan",
        {"thresholds": {"a": 1}, "max_regression": math.nan},
        "quality_gate.max_regression",
    ),
    Case(
        "gate-regression-bool",
        {"thresholds": {"a": 1}, "max_regression": False},
        "quality_gate.max_regression",
    ),
    Case("gate-regression-negative", {"max_regression": {"a": -1e-9}}, "quality_gate.max_regression.a"),
    Case("gate-mixed-keys", {"thresholds": {1: 0.9, "1": 0.5}}, "quality_gate.thresholds"),
    Case("gate-none-key", {"thresholds": {None: 0.9}}, "quality_gate.thresholds"),
    Case("gate-tuple-key", {"max_regression": {("a",): 0.1}}, "quality_gate.max_regression"),
    Case("gate-empty-key", {"thresholds": {" ": 0.9}}, "quality_gate.thresholds"),
    Case("gate-long-key", {"thresholds": {"k" * 10**6: 0.9}}, "quality_gate.thresholds"),
    Case(
        "gate-many-metrics", {"thresholds": {f"m{i}": 0.5 for i in range(100_000)}}, "quality_gate.thresholds"
    ),
    Case("gate-thresholds-list", {"thresholds": [["acc", 0.9]]}, "quality_gate.thresholds"),
    Case("gate-option-int-key", {1: 1, "thresholds": {"a": 1}}, "quality_gate"),
    Case("gate-option-typo", {"treshold": {"a": 1}}, "quality_gate.treshold"),
    Case("gate-on-failure-list", {"thresholds": {"a": 1}, "on_failure": ["skip"]}, "quality_gate.on_failure"),
    Case("gate-on-failure-dict", {"thresholds": {"a": 1}, "on_failure": {}}, "quality_gate.on_failure"),
    Case("gate-not-mapping", [("thresholds", {"a": 1})], "quality_gate"),
    Case("gate-ok-threshold", {"thresholds": {"accuracy": 0.9}}, None),
    Case("gate-ok-regression-map", {"max_regression": {"accuracy": 0.01}}, None),
    Case("gate-ok-both", {"thresholds": {"acc": 0.9}, "max_regression": 0.01, "on_failure": "skip"}, None),
    Case("gate-ok-lower", {"thresholds": {"loss": 0.3}, "lower_is_better": ["loss"]}, None),
    Case("gate-ok-int-bound", {"thresholds": {"acc": 1}, "max_regression": {"acc": 0}}, None),
]


@pytest.mark.parametrize("case", GATES, ids=lambda c: c.id)
def test_gate_python_api(case: Case) -> None:
    _check(case, lambda: QualityGate.from_dict(case.value))


VERDICTS = [
    # (metrics, baseline, serving version): none of these may bless the candidate
    ("cand-missing", {"loss": 0.1}, {"accuracy": 0.9}, 3),
    ("cand-nan", {"accuracy": math.nan}, {"accuracy": 0.9}, 3),
    ("cand-inf", {"accuracy": math.inf}, {"accuracy": 0.9}, 3),
    ("cand-10e400", {"accuracy": 10**400}, {"accuracy": 0.9}, 3),
    ("cand-bool", {"accuracy": True}, {"accuracy": 0.9}, 3),
    ("cand-string", {"accuracy": "0.99"}, {"accuracy": 0.9}, 3),
    ("cand-not-mapping", [["accuracy", 0.99]], {"accuracy": 0.9}, 3),
    ("base-missing", {"accuracy": 0.99}, {"acc": 0.9}, 3),
    ("base-none", {"accuracy": 0.99}, None, 3),
    ("base-nan", {"accuracy": 0.99}, {"accuracy": math.nan}, 3),
    ("base-not-mapping", {"accuracy": 0.99}, ["accuracy"], 3),
    ("regressed", {"accuracy": 0.1}, {"accuracy": 0.99}, 3),
]


@pytest.mark.parametrize(
    ("metrics", "baseline", "version"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS]
)
def test_gate_verdicts_never_bless_what_they_cannot_check(metrics, baseline, version) -> None:
    gate = QualityGate.from_dict({"max_regression": {"accuracy": 0.01}})
    verdict, seconds, peak = bounded(lambda: gate.evaluate(metrics, baseline, version))
    assert not isinstance(verdict, Exception), repr(verdict)
    assert not verdict.blessed and any("accuracy" in f or "metrics" in f for f in verdict.failures)
    assert seconds < TIME_LIMIT and peak < MEMORY_LIMIT


# -- the publish operator (Python API) -----------------------------------------------------------
OPERATOR = [
    Case("op-version-int64-max", {"version": INT64_MAX}, None),
    Case("op-version-int64-max-text", {"version": str(INT64_MAX)}, None),
    Case("op-version-over-int64", {"version": INT64_MAX + 1}, "version"),
    Case("op-version-over-int64-text", {"version": str(INT64_MAX + 1)}, "version"),
    Case("op-version-20-digits", {"version": "9" * 20}, "version"),
    Case("op-version-5000-digits", {"version": "9" * 5000}, "version"),
    Case("op-version-10e400", {"version": 10**400}, "version"),
    Case("op-version-negative", {"version": -1}, "version"),
    Case("op-version-float", {"version": 2.0}, "version"),
    Case("op-version-bool", {"version": True}, "version"),
    Case("op-version-arabic-digits", {"version": "٣"}, "version"),
    Case("op-version-underscore", {"version": "1_0"}, "version"),
    Case(
        "op-gate-regression-alone", {"quality_gate": {"max_regression": 0.01}}, "quality_gate.max_regression"
    ),
    Case("op-gate-mixed-keys", {"quality_gate": {"thresholds": {1: 0.5, "a": 1}}}, "quality_gate.thresholds"),
    Case("op-gate-10e400", {"quality_gate": {"thresholds": {"a": 10**400}}}, "quality_gate.thresholds.a"),
    Case("op-gate-ok", {"version": 2, "quality_gate": {"thresholds": {"accuracy": 0.5}}}, None),
]


@pytest.fixture
def fake_targets(monkeypatch):
    from airflow_tfk.serving import targets
    from tests.serving.fakes import FakeServing

    made: list[Any] = []
    behaviour = {1: "ok", 2: "ok", INT64_MAX: "ok"}

    def get(kind, spec, **config):
        target = FakeServing(spec, behaviour)
        target.exported_metrics = {2: {"accuracy": 0.9}}
        made.append(target)
        return target

    monkeypatch.setattr(targets, "get_serving_target", get)
    return made


@pytest.mark.parametrize("case", OPERATOR, ids=lambda c: c.id)
def test_publish_operator(case: Case, fake_targets) -> None:
    from types import SimpleNamespace

    from airflow_tfk.operators.serving import TFPublishModelOperator

    ti = SimpleNamespace(dag_id="d", task_id="publish", run_id="r", map_index=-1, try_number=1)
    ti.xcom_pull = lambda **_: None

    def run() -> Any:
        op = TFPublishModelOperator(task_id="publish", model_name="digits", claim="models", **case.value)
        return op.execute({"ti": ti})

    _check(case, run)
    if case.field is not None:
        assert fake_targets == []  # refused before any target was made
    else:
        assert fake_targets and fake_targets[0].config.get("digits").stable == int(
            case.value.get("version", 2)
        )


# -- DAG-as-code folders: airflow-tfk validate ------------------------------------------------------
TRAINING = {
    "cluster": {
        "image": "airflow-tfk/training:2.21.0",
        "mode": "all_reduce",
        "command": ["python", "train.py"],
        "worker": {"replicas": 1},
        "storage": {"logs": {"claim": "tfk-logs"}, "models": {"claim": "tfk-models"}},
    },
}
FOLDER = [
    Case("file-gate-regression-alone", {"max_regression": 0.05}, "publish.quality_gate.max_regression"),
    Case("file-gate-empty-map", {"max_regression": {}}, "publish.quality_gate.max_regression"),
    Case(
        "file-gate-lower-unchecked",
        {"thresholds": {"a": 1}, "lower_is_better": ["b"]},
        "publish.quality_gate.lower_is_better",
    ),
    Case("file-gate-int-key", {"thresholds": {1: 0.5}}, "publish.quality_gate.thresholds"),
    Case("file-gate-huge-int", {"thresholds": {"a": 10**400}}, "publish.quality_gate.thresholds.a"),
    Case("file-gate-bool", {"thresholds": {"a": True}}, "publish.quality_gate.thresholds.a"),
    Case("file-gate-null-key", {"thresholds": {None: 1}}, "publish.quality_gate.thresholds"),
    Case("file-gate-jinja-in-key", {"thresholds": {"{{ 7*7 }}": 1}}, None),
    Case("file-gate-ok", {"thresholds": {"accuracy": 0.9}, "max_regression": 0.01}, None),
    Case("file-gate-ok-regression-map", {"max_regression": {"accuracy": 0.01}}, None),
]


def _yaml(value: Any) -> str:
    # YAML flow style written by hand: json.dumps cannot write 10**400's key types or None keys
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_yaml(k)}: {_yaml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


@pytest.mark.parametrize("case", FOLDER, ids=lambda c: c.id)
def test_training_folder_validate(case: Case, tmp_path: Path) -> None:
    from airflow_tfk.cli import main as cli

    text = "cluster: " + json.dumps(TRAINING["cluster"]) + "\n"
    text += f"publish: {{model_name: digits, quality_gate: {_yaml(case.value)}}}\n"
    path = tmp_path / "train.yaml"
    path.write_text(text)
    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with redirect_stdout(out), redirect_stderr(err):
            return cli.main(["validate", str(path)])

    code, seconds, peak = bounded(run)
    assert peak < MEMORY_LIMIT and seconds < 2 * TIME_LIMIT, (peak, seconds)
    stderr = err.getvalue()
    assert "Traceback" not in stderr
    if case.field is None:
        assert code == 0, stderr
    else:
        assert code == cli.EXIT_SPEC_ERROR, (code, stderr[:500])
        assert f": {case.field}" in stderr, stderr[:500]


# -- the UI form's conf: params rendered into the gate and the version ------------------------------
UI_TRAINING = """
params:
  min_accuracy: {default: 0.9, title: Minimum accuracy}
  tolerance: {default: 0.01, title: Tolerated regression}
  model_version: {default: 1, title: Version}
publish:
  model_name: digits
  version: "{{ params.model_version }}"
  quality_gate:
    thresholds: {accuracy: "{{ params.min_accuracy }}"}
    max_regression: "{{ params.tolerance }}"
"""
UI_TRAINING += "cluster: " + json.dumps(TRAINING["cluster"]) + "\n"

UI_CONF = [
    Case("ui-ok", {}, None),
    Case("ui-version-int64-max", {"model_version": INT64_MAX}, None),
    Case("ui-version-over-int64", {"model_version": INT64_MAX + 1}, "version"),
    Case("ui-version-text-over-int64", {"model_version": "92233720368547758070"}, "version"),
    Case("ui-version-negative", {"model_version": -3}, "version"),
    Case("ui-accuracy-string", {"min_accuracy": "high"}, "quality_gate.thresholds.accuracy"),
    Case("ui-accuracy-nan", {"min_accuracy": math.nan}, "quality_gate.thresholds.accuracy"),
    Case("ui-accuracy-1e400", {"min_accuracy": json.loads("1e400")}, "quality_gate.thresholds.accuracy"),
    Case("ui-accuracy-10e400", {"min_accuracy": 10**400}, "quality_gate.thresholds.accuracy"),
    Case("ui-accuracy-bool", {"min_accuracy": True}, "quality_gate.thresholds.accuracy"),
    Case("ui-accuracy-list", {"min_accuracy": [0.9]}, "quality_gate.thresholds.accuracy"),
    Case("ui-accuracy-jinja", {"min_accuracy": "{{ 7*7 }}"}, "quality_gate.thresholds.accuracy"),
    Case("ui-tolerance-negative", {"tolerance": -0.5}, "quality_gate.max_regression"),
    Case("ui-tolerance-null", {"tolerance": None}, None),
]


@pytest.fixture(scope="module")
def ui_dag():
    from airflow_tfk.dagfactory.builder import build_dag
    from airflow_tfk.dagfactory.training import parse_training
    from airflow_tfk.spec.yaml_reader import load_yaml_mapping

    training = parse_training(load_yaml_mapping(UI_TRAINING), default_dag_id="ui", source="ui.yaml")
    return build_dag(training, UI_TRAINING)


@pytest.mark.parametrize("case", UI_CONF, ids=lambda c: c.id)
def test_ui_form_conf(case: Case, ui_dag) -> None:
    task = ui_dag.get_task("publish")
    params = {"min_accuracy": 0.9, "tolerance": 0.01, "model_version": 1, **case.value}
    env = ui_dag.get_template_env()

    def run() -> Any:
        from airflow_tfk.operators.serving import TFPublishModelOperator

        rendered = {
            name: task.render_template(getattr(task, name), {"params": params}, env)
            for name in ("version", "quality_gate")
        }
        if rendered["quality_gate"].get("max_regression") is None:
            del rendered["quality_gate"]["max_regression"]
        op = TFPublishModelOperator(task_id="p", model_name="digits", claim="models", **rendered)
        return op._version(), op.gate()

    _check(case, run)


# -- the model server's REST and gRPC requests --------------------------------------------------------
from tests.serving.conftest import model_store  # noqa: E402, F401 - the session's tiny SavedModels (a fixture)

BODY_LIMIT = 1 << 20


class Server:
    def __init__(self, proc: subprocess.Popen, rest: int, grpc: int) -> None:
        self.proc, self.rest, self.grpc = proc, rest, grpc
        self.ps = psutil.Process(proc.pid)

    def usage(self) -> tuple[float, float]:
        cpu = self.ps.cpu_times()
        return cpu.user + cpu.system, self.ps.memory_info().rss


@pytest.fixture(scope="module")
def server(model_store, tmp_path_factory):  # noqa: F811 - the fixture imported above
    from airflow_tfk.protocol.model_config import ModelConfig
    from tests.serving.stand_in import stand_in_server

    store = model_store.ready()
    flags = (
        f"--rest_api_max_body_bytes={BODY_LIMIT}",
        "--rest_api_timeout_in_ms=1000",
        "--rest_api_header_timeout_in_ms=1000",
    )
    models = (ModelConfig("linear", str(store / "linear"), versions=(1,)),)
    workdir = tmp_path_factory.mktemp("hostile-server")
    with stand_in_server(
        workdir,
        models,
        *flags,
        ready=lambda s: _http(s.rest, _post(b'{"instances": [[1.0, 2.0]]}'))[0] == 200,
    ) as s:
        yield Server(s.proc, s.rest, s.grpc)


def _post(body: bytes, path: str = "/v1/models/linear:predict", headers: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    return head.encode() + body


def _http(port: int, data: bytes, timeout: float = 20.0) -> tuple[int, str]:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(data)
            answer = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
                head, _, body = answer.partition(b"\r\n\r\n")
                length = [
                    int(x.split(b":")[1])
                    for x in head.split(b"\r\n")
                    if x.lower().startswith(b"content-length")
                ]
                if length and len(body) >= length[0]:
                    break
    except OSError:
        return 0, ""
    if not answer:
        return 0, ""
    return int(answer.split(b" ", 2)[1]), answer.partition(b"\r\n\r\n")[2].decode("utf-8", "replace")


def _deep(n: int) -> bytes:
    return b'{"instances": ' + b"[" * n + b"]" * n + b"}"


REST = [
    # (id, raw request, status, words the answer names)
    ("rest-deep-100000", _post(_deep(100_000)), 400, "nested too deeply"),
    (
        "rest-deep-5000-objects",
        _post(b'{"instances": ' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}"),
        400,
        "nested too deeply",
    ),
    ("rest-40-dims", _post(b'{"instances": ' + b"[" * 40 + b"1" + b"]" * 40 + b"}"), 400, "input 'inputs'"),
    (
        "rest-declares-too-much",
        _post(b'{"instances": [' + b",".join([b"[1,2]"] * 70_000) + b"]}"),
        413,
        "declares shape [70000, 2]",
    ),
    (
        "rest-wide-row",
        _post(b'{"instances": [[' + b",".join([b"1"] * 140_000) + b"]]}"),
        413,
        "declares shape [1, 140000]",
    ),
    (
        "rest-columnar-too-much",
        _post(b'{"inputs": {"inputs": [' + b",".join([b"[1,2]"] * 70_000) + b"]}}"),
        413,
        "declares shape",
    ),
    ("rest-body-over-limit", _post(b" " * (BODY_LIMIT + 1)), 413, "exceeds the limit"),
    ("rest-length-lies", _post(b"{}", headers="Content-Length: 999999\r\n"), 400, "Content-Length"),
    (
        "rest-length-negative",
        b"POST /v1/models/linear:predict HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        400,
        "Content-Length",
    ),
    (
        "rest-length-huge",
        b"POST /v1/models/linear:predict HTTP/1.1\r\nContent-Length: " + b"9" * 400 + b"\r\n\r\n",
        400,
        "Content-Length",
    ),
    (
        "rest-chunked",
        b"POST /v1/models/linear:predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        411,
        "Content-Length",
    ),
    (
        "rest-head-too-large",
        b"GET /v1/models/linear HTTP/1.1\r\nX: " + b"a" * (70 << 10) + b"\r\n\r\n",
        431,
        "head",
    ),
    (
        "rest-version-int64-max",
        b"GET /v1/models/linear/versions/9223372036854775807 HTTP/1.1\r\n\r\n",
        404,
        "9223372036854775807",
    ),
    (
        "rest-version-over-int64",
        b"GET /v1/models/linear/versions/9223372036854775808 HTTP/1.1\r\n\r\n",
        400,
        "int64",
    ),
    (
        "rest-version-30-digits",
        _post(b"{}", "/v1/models/linear/versions/" + "9" * 30 + ":predict"),
        400,
        "int64",
    ),
    ("rest-nan", _post(b'{"instances": [[NaN, 1]]}'), 400, "NaN"),
    ("rest-1e400", _post(b'{"instances": [[1e400, 1]]}'), 400, "out of the range"),
    ("rest-huge-int", _post(b'{"instances": [[' + b"9" * 4000 + b", 1]]}"), 400, "input 'inputs'"),
    ("rest-not-utf8", _post(b'{"instances": [["\xff\xfe", 1]]}'), 400, "JSON"),
    ("rest-ragged", _post(b'{"instances": [[1, 2], [1, 2, 3]]}'), 400, "input 'inputs'"),
    ("rest-ok", _post(b'{"instances": [[1.0, 2.0]]}'), 200, "predictions"),
]


def _measured(server: Server, call) -> tuple[Any, float, float]:
    cpu0, rss0 = server.usage()
    result = call()
    cpu1, rss1 = server.usage()
    return result, cpu1 - cpu0, rss1 - rss0


@pytest.mark.e2e
@pytest.mark.parametrize(("request_", "status", "words"), [r[1:] for r in REST], ids=[r[0] for r in REST])
def test_model_server_rest(server: Server, request_: bytes, status: int, words: str) -> None:
    (got, body), cpu, rss = _measured(server, lambda: _http(server.rest, request_))
    assert (got, words in body) == (status, True), (got, body[:300])
    assert cpu < TIME_LIMIT and rss < MEMORY_LIMIT, (cpu, rss)
    assert _http(server.rest, _post(b'{"instances": [[1.0, 2.0]]}'))[0] == 200


def _grpc_cases() -> list[tuple[str, bytes, str, str]]:
    from tests.serving.test_model_server_bounds import _tensor, predict_request

    def spec(name: str, version: int | None = None) -> bytes:
        from tests.serving.test_model_server_bounds import _field, _varint

        out = _field(1, name.encode())
        if version is not None:
            out += _field(2, _varint(1 << 3) + _varint(version))  # google.protobuf.Int64Value
        return out

    def request(tensor: bytes, model_spec: bytes) -> bytes:
        from tests.serving.test_model_server_bounds import _field

        return _field(1, model_spec) + _field(2, _field(1, b"inputs") + _field(2, tensor))

    return [
        (
            "grpc-2e6x64-one-value",
            predict_request(_tensor([2_000_000, 64], [1.0])),
            "RESOURCE_EXHAUSTED",
            "declares shape",
        ),
        (
            "grpc-int64-dims",
            predict_request(_tensor([INT64_MAX, INT64_MAX], [1.0])),
            "RESOURCE_EXHAUSTED",
            "declares shape",
        ),
        (
            "grpc-many-small-dims",
            predict_request(_tensor([2] * 30, [1.0])),
            "RESOURCE_EXHAUSTED",
            "declares shape",
        ),
        ("grpc-negative-dim", predict_request(_tensor([-5, 2], [1.0])), "INVALID_ARGUMENT", "negative"),
        (
            "grpc-content-short",
            predict_request(_tensor([100, 2], content=b"\x00" * 4)),
            "INVALID_ARGUMENT",
            "tensor_content",
        ),
        ("grpc-bad-dtype", predict_request(_tensor([1, 2], [1.0], dtype=12345)), "INVALID_ARGUMENT", "dtype"),
        (
            "grpc-over-message-limit",
            predict_request(_tensor([1, 2], content=b"\x00" * (BODY_LIMIT + (2 << 20)))),
            "RESOURCE_EXHAUSTED",
            "",
        ),
        (
            "grpc-version-int64-max",
            request(_tensor([1, 2], [1.0, 2.0]), spec("linear", INT64_MAX)),
            "NOT_FOUND",
            "9223372036854775807",
        ),
        ("grpc-unknown-model", predict_request(_tensor([1, 2], [1.0, 2.0]), "nope"), "NOT_FOUND", "nope"),
        ("grpc-ok", predict_request(_tensor([1, 2], [1.0, 2.0])), "OK", ""),
    ]


GRPC = _grpc_cases()


@pytest.mark.e2e
@pytest.mark.parametrize(("request_", "code", "words"), [g[1:] for g in GRPC], ids=[g[0] for g in GRPC])
def test_model_server_grpc(server: Server, request_: bytes, code: str, words: str) -> None:
    from tests.serving.test_model_server_bounds import grpc_predict

    (got, details), cpu, rss = _measured(server, lambda: grpc_predict(server.grpc, request_))
    assert (got, words in details) == (code, True), details[:300]
    assert cpu < TIME_LIMIT and rss < MEMORY_LIMIT, (cpu, rss)


def test_the_corpus_size() -> None:
    total = len(GATES) + len(VERDICTS) + len(OPERATOR) + len(FOLDER) + len(UI_CONF) + len(REST) + len(GRPC)
    assert total >= 100
