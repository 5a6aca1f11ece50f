"""The training file's own keys are declared once: a key added to the declarations is
checked by parse_training and described (type, bounds, default) in the JSON Schema."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dagfactory import training_keys
from airflow_tfk.dagfactory.loader import TrainingFileError, read_training
from airflow_tfk.dagfactory.spec_docs import schema_text, training_schema
from airflow_tfk.dagfactory.training import TrainingFile, parse_training
from airflow_tfk.dagfactory.training_keys import KEYS, Key

CLUSTER = {"image": "tf:1", "mode": "all_reduce", "command": ["python"], "worker": {"replicas": 1}}
MADE_UP = Key("warmup_minutes", "minutes before the first checkpoint", "int", 5, 0, 60)


def parse(**data):
    return parse_training({"cluster": dict(CLUSTER), **data}, default_dag_id="t", source="t.yaml")


def test_a_made_up_key_reaches_the_schema_and_the_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "warmup_minutes" not in training_schema()["properties"]
    with pytest.raises(SpecError, match="unknown key"):
        parse(warmup_minutes=3)

    keys = (*KEYS, MADE_UP)
    assert training_schema(keys=keys)["properties"]["warmup_minutes"] == {
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": 60,
        "default": 5,
        "description": "minutes before the first checkpoint",
    }
    monkeypatch.setattr(training_keys, "KEYS", keys)
    assert parse(warmup_minutes=3).dag_id == "t"
    with pytest.raises(SpecError) as info:
        parse(warmup_minutes=61, retries=-1)
    assert {(e.field, e.rule) for e in info.value.errors} == {
        ("warmup_minutes", "must be an integer between 0 and 60"),
        ("retries", "must be an integer between 0 and 100"),
    }


def test_every_declared_key_is_kept_on_the_training_file() -> None:
    fields = {f.name for f in dataclasses.fields(TrainingFile)}
    assert {key.name for key in KEYS} <= fields
    assert set(training_keys.KINDS) >= {key.kind for key in KEYS}


def test_each_key_error_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(
        "retries: 101\ncleanup: some\nbackend: docker\nprogress_interval: 0\n"
        "cluster:\n  image: i\n  command: [a]\n  worker: {replicas: 1}\n"
    )
    with pytest.raises(TrainingFileError) as info:
        read_training(path)
    text = "\n".join(e.describe() for e in info.value.all())
    for line, expected in (
        (1, "retries: must be an integer between 0 and 100 (got 101)"),
        (2, "cleanup: must be ps or all"),
        (3, "backend: must be one of kubernetes, local"),
        (4, "progress_interval: must be a number of seconds between 1 and 3600"),
    ):
        assert f"{path}:{line}: {expected}" in text, text


def test_the_schema_agrees_with_the_checks_on_top_level_keys() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(schema_text())
    good = {
        "cluster": CLUSTER,
        "retries": 3,
        "owners": "me",
        "tags": ["a"],
        "cleanup": "all",
        "catchup": None,
    }
    jsonschema.validate(good, schema)
    parse(**{k: v for k, v in good.items() if k != "cluster"})
    for bad in (
        {"retries": 101},
        {"retries": "3"},
        {"cleanup": "some"},
        {"backend": "docker"},
        {"progress_interval": 0.5},
        {"catchup": "yes"},
        {"dag_id": "a b"},
        {"tags": [""]},
        {"max_active_runs": 0},
        {"stall_seconds": -1},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**good, **bad}, schema)
        with pytest.raises(SpecError):
            parse(**bad)
