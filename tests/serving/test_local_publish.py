"""Publishing real (tiny) SavedModels to the local model server: AVAILABLE, predict,
rollback of broken versions, and no process left behind."""

from __future__ import annotations

import threading
import time

import psutil
import pytest

from airflow_tfk.serving._http import request_json
from airflow_tfk.serving.base import ServingError
from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.publish import publish
from airflow_tfk.serving.spec import ServingSpec
from tests.listeners import listening, not_loopback
from tests.serving.conftest import started_server

pytestmark = pytest.mark.e2e
ROWS = {"instances": [[1.0, 2.0]]}


@pytest.fixture(scope="module")
def serving(model_store):
    target = started_server(model_store, "tfs-linear")
    model_store.ready()
    yield target
    record = target._record()
    target.delete(print)
    assert not target.running()
    assert record and not psutil.pid_exists(record["pid"])


@pytest.fixture
def store(model_store):
    return model_store.base


def predict(target: LocalServing, **where) -> list:
    return target.predict(ROWS, **where)["predictions"]


def test_the_model_server_listens_on_loopback_only(serving):
    # the local equivalent of the serving NetworkPolicy: nothing off this machine reaches it
    pid = serving._record()["pid"]
    assert listening(pid) and not not_loopback(pid), listening(pid)


# The tests below share one server and run in file order: a story of one model's life.
def test_publish_then_upgrade_keeps_previous_loaded(serving, store):
    lines: list[str] = []
    first = publish(serving, version=1, emit=lines.append, poll=0.2)
    assert first.version == 1 and first.previous_version is None
    assert first.endpoint.endswith("/v1/models/linear/labels/stable")
    assert any("stand-in" in line for line in lines)  # says which server it runs
    assert predict(serving, label="stable") == [[3.0]]

    second = publish(serving, version=2, emit=lines.append, poll=0.2)
    assert (second.version, second.previous_version, second.kept_versions) == (2, 1, (1, 2))
    assert predict(serving, label="stable") == [[6.0]]
    assert predict(serving) == [[6.0]]
    status, body = request_json("GET", f"{serving.url}/v1/models/linear")
    assert status == 200
    assert {e["version"]: e["state"] for e in body["model_version_status"]} == {
        "2": "AVAILABLE",
        "1": "AVAILABLE",
    }


def test_corrupt_version_is_rolled_back_and_previous_still_answers(serving, store):
    lines: list[str] = []
    with pytest.raises(ServingError, match="version 3 .*failed to load.*version 2 is still serving"):
        publish(serving, version=3, emit=lines.append, poll=0.2)
    assert any("rolled the version policy" in line for line in lines)
    # it failed under the candidate name; the model's own name never knew it
    status, body = request_json("GET", f"{serving.url}/v1/models/linear-tfk-candidate/versions/3")
    entry = body["model_version_status"][0]
    assert entry["state"] == "END" and entry["status"]["error_code"] != "OK"
    status, body = request_json("GET", f"{serving.url}/v1/models/linear/versions/3")
    assert status == 404
    cfg = serving.read_config().get("linear")
    assert cfg.versions == (1, 2) and cfg.stable == 2
    assert predict(serving, label="stable") == [[6.0]]
    assert predict(serving) == [[6.0]]


def test_signature_that_rejects_the_sample_is_rolled_back(serving, store):
    with pytest.raises(ServingError, match="predict answered HTTP 400"):
        publish(serving, version=4, poll=0.2)
    assert serving.read_config().get("linear").versions == (1, 2)
    assert predict(serving, label="stable") == [[6.0]]
    # once the server re-reads the policy, the candidate version 4 is unloaded again
    deadline = time.monotonic() + 10
    candidate = "linear-tfk-candidate"
    while serving.version_state(4, model=candidate).state != "END" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert serving.version_state(4, model=candidate).state == "END"
    assert serving.version_state(4) is None  # never loaded under the model's own name
    assert predict(serving) == [[6.0]]


def test_zero_exposure_clients_never_see_a_candidate_that_is_rolled_back(serving, store):
    """A client calls the default (unversioned) endpoint in a loop while a corrupt
    candidate and one whose signature rejects the sample are published and rolled back:
    every answer comes from the serving version 2, none is an error."""
    answers: list[object] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                status, body = request_json(
                    "POST", f"{serving.url}/v1/models/linear:predict", ROWS, timeout=10
                )
                answers.append(body["predictions"] if status == 200 else (status, body))
            except OSError as exc:
                answers.append(exc)

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    try:
        for bad in (3, 4):
            with pytest.raises(ServingError, match=f"version {bad} was not published"):
                publish(serving, version=bad, poll=0.2)
        time.sleep(1.5)  # past the server's next config poll: the candidate is unloaded
    finally:
        stop.set()
        thread.join(timeout=20)
    assert len(answers) > 20
    others = [a for a in answers if a != [[6.0]]]
    assert others == [], f"{len(others)} of {len(answers)} answers were not version 2's: {others[:3]}"


def test_missing_version_times_out_and_rolls_back(serving, store):
    impatient = LocalServing(
        ServingSpec(model_name="linear", claim="models", name="tfs-linear", load_timeout_seconds=2),
        root=serving.root,
        server="stand-in",
    )
    with pytest.raises(ServingError, match="did not become AVAILABLE within 2 s .*never"):
        publish(impatient, version=9, poll=0.2, sample_request=ROWS)
    assert predict(serving, label="stable") == [[6.0]]


def test_default_version_is_the_newest_and_republishing_changes_nothing(serving, store):
    pid = serving._record()["pid"]
    again = LocalServing(serving.spec, root=serving.root, server="stand-in")
    with pytest.raises(ServingError, match="linear version 5 was not published"):
        publish(again, poll=0.2)  # the newest export (5) is a corrupt copy
    lines: list[str] = []
    result = publish(again, version=2, emit=lines.append, poll=0.2)
    assert again._record()["pid"] == pid  # the same server, found through its record
    assert result.version == 2 and any("already the serving version" in x for x in lines)
    assert predict(serving, label="stable") == [[6.0]]


def test_operator_publishes_on_the_local_backend(serving, model_store):
    from types import SimpleNamespace

    from airflow_tfk.operators.serving import TFPublishModelOperator

    op = TFPublishModelOperator(
        task_id="publish",
        model_name="linear",
        claim="models",
        version=1,
        backend="local",
        backend_config={"root": str(model_store.root)},
        serving={"name": "tfs-linear", "load_timeout_seconds": 60},
    )
    ti = SimpleNamespace(dag_id="d", task_id="publish", run_id="r", map_index=-1, try_number=1)
    xcom = op.execute({"ti": ti})
    assert (xcom["model_name"], xcom["version"], xcom["previous_version"]) == ("linear", 1, 2)
    assert xcom["endpoint"] == f"{serving.url}/v1/models/linear/labels/stable"
    assert predict(serving, label="stable") == [[3.0]]


def test_grpc_smoke_test_and_grpc_predict(serving, model_store):
    grpc_spec = ServingSpec(model_name="linear", claim="models", name="tfs-linear", smoke_protocol="grpc")
    over_grpc = LocalServing(grpc_spec, root=serving.root, server="stand-in")
    lines: list[str] = []
    result = publish(over_grpc, version=2, emit=lines.append, poll=0.2)
    assert result.version == 2 and any("smoke grpc predict of version 2 answered" in x for x in lines)
    answer = over_grpc.predict(ROWS, label="stable", protocol="grpc")
    assert answer == {"predictions": [[6.0]], "model_version": 2}
    with pytest.raises(ServingError, match="version 9 of linear is not in the model store"):
        over_grpc.predict(ROWS, version=9, protocol="grpc")
    with pytest.raises(ServingError, match="NOT_FOUND: Could not find version 4 of model linear"):
        over_grpc.predict(ROWS, version=4, protocol="grpc")  # exported, never loaded under linear
