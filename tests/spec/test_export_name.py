"""The model name a spec's argv exports under, read as the runtime's own parser reads it."""

from __future__ import annotations

import pytest

from airflow_tfk.runtime.flags import parse_flags
from airflow_tfk.spec.export_name import MODEL_NAME_FLAG, flag_value, known_export_name, publish_name_mismatch


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--tfk_steps", "5"],
        ["--tfk_model_name", "digits"],
        ["--tfk_model_name=digits"],
        ["--tfk_model_name", "a", "--tfk_steps", "3", "--tfk_model_name=b"],
        ["--hidden", "8", "--tfk_model_name", "b", "--tfk_model_name", "c"],
    ],
)
def test_the_flag_reads_as_the_runtime_parses_it(argv: list[str]) -> None:
    flags, _ = parse_flags(argv, env={})
    assert flag_value(argv) == flags.model_name
    assert MODEL_NAME_FLAG == "--tfk_model_name"


def test_the_exporting_tasks_argv_decides() -> None:
    base = {"command": ["python", "app.py"], "args": ["--tfk_model_name", "top"], "worker": {"replicas": 2}}
    assert known_export_name(base) == ("top", "args")
    # the chief exports: its own args replace the spec's
    chief = {**base, "chief": {"replicas": 1, "args": ["--tfk_model_name", "chiefs"]}}
    assert known_export_name(chief) == ("chiefs", "chief.args")
    assert known_export_name({**base, "chief": {"replicas": 1, "args": []}}) is None
    # a worker's own args do not matter when the chief exports
    assert known_export_name({**chief, "worker": {"replicas": 2, "args": ["--tfk_model_name", "w"]}}) == (
        "chiefs",
        "chief.args",
    )
    assert known_export_name({**base, "args": [], "command": ["python", "app.py", "--tfk_model_name=c"]}) == (
        "c",
        "command",
    )


@pytest.mark.parametrize(
    "cluster",
    [
        {"command": ["python", "app.py"]},  # the app's own model_name: only the image knows it
        {"command": ["python", "app.py"], "args": ["--tfk_model_name", "{{ params.model }}"]},
        {"command": ["python", "app.py"], "args": "{{ params.args }}"},
    ],
)
def test_unknown_before_the_run_is_not_checked(cluster: dict) -> None:
    assert known_export_name(cluster) is None
    assert publish_name_mismatch(cluster, "anything") is None


def test_the_mismatch_names_both_fields() -> None:
    cluster = {"command": ["python", "app.py"], "args": ["--tfk_model_name", "digits_v2"]}
    assert publish_name_mismatch(cluster, "digits_v2") is None
    assert publish_name_mismatch(cluster, "{{ params.name }}") is None
    why = publish_name_mismatch(cluster, "digits", prefix="cluster.")
    assert why is not None
    assert why.startswith("is 'digits', but cluster.args gives --tfk_model_name 'digits_v2'"), why
