"""OpenLineage facets of the training and publish operators, as the provider's listener
would put them in its run events, checked against the RunEvent rules and this provider's
facet schemas; and nothing of OpenLineage imported by the operators themselves."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import jsonschema
import pytest

from airflow_tfk._airflow.lineage import dataset_name
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.operators.training import TFTrainingOperator
from tests.helpers import spec_dict, task_context
from tests.openlineage_events import check_event

pytest.importorskip("airflow.providers.openlineage")

SPEC = {
    "image": "tf:2.21",
    "namespace": "ml",
    "mode": "parameter_server",
    "command": ["python", "t.py"],
    "args": ["--tfk_model_name", "digits"],
    "chief": {"replicas": 1},
    "ps": {"replicas": 1},
    "worker": {"replicas": 3, "image": "tf:gpu"},
    "storage": {"data": {"claim": "tfk-data"}, "models": {"claim": "tfk-models"}},
}


def _event(lineage, event_type: str) -> dict:
    from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
    from openlineage.client.serde import Serde

    event = RunEvent(
        eventType=RunState[event_type],
        eventTime="2026-11-25T22:00:00+00:00",
        run=Run(runId=str(uuid.uuid4())),
        job=Job(namespace="tfk-test", name="dag.task", facets=lineage.job_facets),
        producer="https://github.com/apache/airflow",
        inputs=lineage.inputs,
        outputs=lineage.outputs,
    )
    return json.loads(Serde.to_json(event))


def test_training_facets_on_start_come_from_the_spec() -> None:
    op = TFTrainingOperator(task_id="train", backend="local", cluster_spec=SPEC)
    start = _event(op.get_openlineage_facets_on_start(), "START")
    check_event(start)
    assert [(d["namespace"], d["name"]) for d in start["inputs"]] == [("x-tfk-pvc://ml", "tfk-data")]
    assert [(d["namespace"], d["name"]) for d in start["outputs"]] == [
        ("x-tfk-pvc://ml", "tfk-models/digits")
    ]
    cluster = start["job"]["facets"]["tfkCluster"]
    assert cluster["replicas"] == {"chief": 1, "ps": 1, "worker": 3}
    assert (cluster["image"], cluster["images"], cluster["mode"]) == (
        "tf:2.21",
        {"worker": "tf:gpu"},
        "parameter_server",
    )


def test_training_facets_on_complete_carry_what_the_run_exported(local_root) -> None:
    """A real run on the local backend (stand-in tasks, no TensorFlow) whose chief prints
    the runtime's ``metrics`` and ``export`` events: the complete event's model facet is
    what the operator read from that run, not a value the test put there."""
    spec = spec_dict("parameter_server", workers=1, STEPS="2", STEP_SECONDS="0.05", EXPORT_VERSION="7")
    spec["storage"] = {"models": {"claim": "tfk-models"}}
    spec["args"] = ["--tfk_model_name", "digits"]
    spec["chief"]["resources"] = {"cpu": "2"}
    op = TFTrainingOperator(
        task_id="train",
        backend="local",
        cluster_spec=spec,
        progress_interval=0.2,
        prices={"cpu_core_hour": 1.0, "currency": "USD"},
    )
    result = op.execute(task_context())
    assert result["model_version"] == 7
    complete = _event(op.get_openlineage_facets_on_complete(None), "COMPLETE")
    check_event(complete)
    model = complete["outputs"][0]["outputFacets"]["tfkModel"]
    assert (model["version"], model["metrics"]) == (7, {"accuracy": 0.875, "loss": "inf"})
    # what the run held and cost, as its XCom says (the chief's 2 cores for its run time)
    assert model["usage"]["core_seconds"] == result["usage"]["total"]["core_seconds"] > 0
    assert model["usage"]["currency"] == "USD" and model["usage"]["cost"] == result["usage"]["cost"]


def test_publish_facets_carry_what_the_publish_did(monkeypatch) -> None:
    """The publish runs for real against a serving double (tests/serving/fakes.py: a stand-in
    for TF Serving, which cannot run in a unit test): the complete event names the version
    the publish chose, not a value the test put there."""
    from airflow_tfk.serving import targets
    from tests.serving.fakes import FakeServing

    monkeypatch.setattr(
        targets, "get_serving_target", lambda kind, spec, **config: FakeServing(spec, {1: "ok", 2: "ok"})
    )
    op = TFPublishModelOperator(
        task_id="publish",
        model_name="digits",
        claim="tfk-models",
        backend="kubernetes",
        serving={"namespace": "ml"},
    )
    check_event(_event(op.get_openlineage_facets_on_start(), "START"))
    xcom = op.execute(task_context(task_id="publish"))
    complete = _event(op.get_openlineage_facets_on_complete(None), "COMPLETE")
    check_event(complete)
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [
        ("x-tfk-pvc://ml", "tfk-models/digits")
    ]
    out = complete["outputs"][0]
    assert (out["namespace"], out["name"]) == ("x-tfk-serving://ml", "digits")
    facet = out["outputFacets"]["tfkModel"]
    assert (facet["version"], facet["endpoint"]) == (xcom["version"], xcom["endpoint"])
    assert facet["version"] == 2  # the newest good version the double holds


def test_a_facet_off_its_schema_is_caught() -> None:
    op = TFTrainingOperator(task_id="train", backend="local", cluster_spec=SPEC)
    event = _event(op.get_openlineage_facets_on_start(), "START")
    event["job"]["facets"]["tfkCluster"]["replicas"]["worker"] = "three"
    with pytest.raises(jsonschema.ValidationError):
        check_event(event)
    del event["run"]["runId"]
    with pytest.raises(jsonschema.ValidationError):
        check_event(event)


def test_dataset_names() -> None:
    assert dataset_name("file:///srv/models/digits") == ("file", "/srv/models/digits")
    assert dataset_name("x-tfk-serving://local/digits") == ("x-tfk-serving://local", "digits")


def test_the_operators_import_nothing_of_openlineage() -> None:
    code = (
        "import sys, airflow.sdk\n"
        "from airflow_tfk.operators.training import TFTrainingOperator\n"
        "from airflow_tfk.operators.serving import TFPublishModelOperator\n"
        "TFTrainingOperator(task_id='t', backend='local',\n"
        "                   cluster_spec={'image': 'x', 'worker': {'replicas': 1}})\n"
        "import json; print(json.dumps(sorted(m for m in sys.modules if 'openlineage' in m)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    # Airflow's providers manager reads every installed provider's info; that is all.
    assert loaded <= {"airflow.providers.openlineage", "airflow.providers.openlineage.get_provider_info"}
