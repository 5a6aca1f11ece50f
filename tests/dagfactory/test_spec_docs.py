"""One declaration per spec field: the README's table, the UI form's Params, the training
files' JSON Schema and the validation all follow it, with no other edit."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dagfactory.spec_docs import (
    SCHEMA_FILE,
    form_params,
    readme_table,
    schema_text,
    training_schema,
)
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.decl import Form, spec_field

ROOT = Path(__file__).resolve().parents[2]
BASE = {"name": "t", "image": "tf:1", "command": ["python"], "ps": {"replicas": 1}, "worker": {"replicas": 1}}


@dataclasses.dataclass(frozen=True)
class WithExtra(TFClusterSpec):
    """The declarations with one made-up field, as a developer adding a field writes it."""

    warmup_steps: int = spec_field(
        10,
        kind="int",
        lo=0,
        hi=500,
        form=Form("warmup", "Warm-up steps"),
        help="steps before the learning rate reaches its value",
    )


def test_a_new_declaration_reaches_the_table_the_form_the_schema_and_validation():
    assert "warmup_steps" not in readme_table()
    assert "| `warmup_steps` | `10` | steps before the learning rate reaches its value |" in readme_table(
        WithExtra
    )

    path, param = form_params(WithExtra)["warmup"]
    assert path == "warmup_steps"
    assert param == {
        "default": 10,
        "title": "Warm-up steps",
        "description": "steps before the learning rate reaches its value",
        "type": "integer",
        "minimum": 0,
        "maximum": 500,
    }
    assert "warmup" not in form_params()

    cluster = training_schema(WithExtra)["properties"]["cluster"]
    assert cluster["properties"]["warmup_steps"]["maximum"] == 500
    assert "warmup_steps" not in training_schema()["properties"]["cluster"]["properties"]

    assert WithExtra.from_dict({**BASE, "warmup_steps": 7}).warmup_steps == 7
    with pytest.raises(SpecError) as info:
        WithExtra.from_dict({**BASE, "warmup_steps": 501, "port": 0})
    assert {e.field for e in info.value.errors} == {"warmup_steps", "port"}
    with pytest.raises(SpecError, match="unknown key"):
        TFClusterSpec.from_dict({**BASE, "warmup_steps": 7})


def test_the_committed_json_schema_is_current():
    committed = (ROOT / "airflow_tfk" / "dagfactory" / SCHEMA_FILE).read_text(encoding="utf-8")
    assert committed == schema_text(), "stale: run python scripts/gen_spec_docs.py"


def test_the_schema_agrees_with_validation_on_examples():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(schema_text())
    good = {"cluster": {k: v for k, v in BASE.items() if k != "name"}, "schedule": "@daily"}
    jsonschema.validate(good, schema)
    for bad in ({"worker": {"replicas": 0}}, {"mode": "x"}, {"port": 70000}, {"nope": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"cluster": {**good["cluster"], **bad}}, schema)
        with pytest.raises(SpecError):
            TFClusterSpec.from_dict({**BASE, **bad})


def test_every_independent_error_is_reported_with_its_path():
    data = {**BASE, "port": 0, "worker": {"replicas": 0}, "mode": "nope", "ps_grace_seconds": -1}
    with pytest.raises(SpecError) as info:
        TFClusterSpec.from_dict(data)
    fields = [e.field for e in info.value.errors]
    assert sorted(fields) == ["mode", "port", "ps_grace_seconds", "worker.replicas"]
    assert "worker.replicas: must be between 1 and 10000 (got 0)" in str(info.value)
