"""Naming rules, label sanitising and the deterministic cluster name."""

from __future__ import annotations

import pytest

from airflow_tfk import naming
from airflow_tfk.naming import RunIdentity


@pytest.mark.parametrize(
    "value, ok",
    [
        ("a", True),
        ("imagenet", True),
        ("a-1", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("1abc", False),
        ("-a", False),
        ("a-", False),
        ("A", False),
        ("a_b", False),
        ("a.b", False),
        ("", False),
    ],
)
def test_dns1035_label(value, ok):
    assert naming.is_dns1035_label(value) is ok


@pytest.mark.parametrize(
    "value, ok",
    [
        ("1abc", True),
        ("abc", True),
        ("a.b", False),
        ("a" * 64, False),
        ("", False),
    ],
)
def test_dns1123_label(value, ok):
    assert naming.is_dns1123_label(value) is ok


@pytest.mark.parametrize(
    "value, ok",
    [
        ("a.b.c", True),
        ("my-secret", True),
        ("a..b", False),
        ("A", False),
        (".a", False),
        ("a" * 253, True),
        ("a" * 254, False),
    ],
)
def test_dns1123_subdomain(value, ok):
    assert naming.is_dns1123_subdomain(value) is ok


@pytest.mark.parametrize(
    "value, ok",
    [
        ("", True),
        ("abc", True),
        ("A.b_c-1", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("-a", False),
        ("a-", False),
        ("a b", False),
        ("a/b", False),
        ("a:b", False),
    ],
)
def test_label_value(value, ok):
    assert naming.is_label_value(value) is ok


@pytest.mark.parametrize(
    "key, ok",
    [
        ("team", True),
        ("example.com/team", True),
        ("nvidia.com/gpu", True),
        ("a/b/c", False),
        ("Example.com/x", False),
        ("/x", False),
        ("x/", False),
        ("", False),
        ("a" * 63, True),
        ("a" * 64, False),
    ],
)
def test_label_key(key, ok):
    assert naming.is_label_key(key) is ok


@pytest.mark.parametrize(
    "name, ok",
    [
        ("HOME", True),
        ("_x", True),
        ("a.b-c", True),
        ("1X", False),
        ("A B", False),
        ("A=B", False),
        ("", False),
    ],
)
def test_env_name(name, ok):
    assert naming.is_env_name(name) is ok


@pytest.mark.parametrize(
    "value",
    [
        "manual__2024-01-01T00:00:00+00:00",
        "scheduled__2024-01-01T00:00:00+00:00",
        "x" * 200,
        "a b c",
        "-leading",
        "ünïcode",
        "::::",
        "a\nb",
        "",
    ],
)
def test_safe_label_value_is_always_valid(value):
    assert naming.is_label_value(naming.safe_label_value(value))


def test_safe_label_value_keeps_valid_values_and_separates_rewritten_ones():
    assert naming.safe_label_value("my_dag.v2") == "my_dag.v2"
    # Two values that sanitise to the same text stay distinct thanks to the hash suffix.
    assert naming.safe_label_value("a:b") != naming.safe_label_value("a;b")
    assert naming.safe_label_value("x" * 64) != naming.safe_label_value("x" * 65)


def test_cluster_name_is_deterministic_valid_and_distinct():
    name = naming.cluster_name_for("dag", "Train Model", "run1")
    assert name == naming.cluster_name_for("dag", "Train Model", "run1")
    assert name.startswith("tfk-train-model-")
    assert len(name) <= 30 and naming.is_dns1035_label(name)
    others = {
        naming.cluster_name_for("dag", "Train Model", "run2"),
        naming.cluster_name_for("dag", "Train Model", "run1", map_index=0),
        naming.cluster_name_for("dag2", "Train Model", "run1"),
    }
    assert name not in others and len(others) == 3


@pytest.mark.parametrize("task_id", ["", "___", "x" * 200, "ÜBER-task", "9lives"])
def test_cluster_name_is_valid_for_any_task_id(task_id):
    name = naming.cluster_name_for("d", task_id, "r")
    assert naming.is_dns1035_label(name) and len(name) <= 30
    # Leaves room for '-evaluator-9999' inside the 63-character hostname.
    assert naming.is_dns1123_label(naming.task_hostname(name, "evaluator", 9999))


def test_task_address_uses_the_role_headless_service():
    assert naming.role_resource_name("c", "worker") == "c-worker"
    assert naming.task_hostname("c", "worker", 3) == "c-worker-3"
    assert naming.task_address("c", "ps", 1, "ns", 2222) == "c-ps-1.c-ps.ns.svc:2222"


def test_run_identity_labels_are_valid_and_annotations_exact():
    ident = RunIdentity("my dag", "train/step", "manual__2024-01-01T00:00:00+00:00", 3)
    labels = ident.labels()
    assert set(labels) == {naming.LABEL_DAG, naming.LABEL_TASK, naming.LABEL_RUN, naming.LABEL_MAP_INDEX}
    assert all(naming.is_label_key(k) and naming.is_label_value(v) for k, v in labels.items())
    assert labels[naming.LABEL_MAP_INDEX] == "3"
    assert ident.annotations()[f"{naming.LABEL_PREFIX}/run-id"] == ident.run_id
    assert RunIdentity("d", "t", "r").labels()[naming.LABEL_MAP_INDEX] == "none"


def test_run_identity_round_trips_and_names_its_cluster():
    ident = RunIdentity("d", "t", "r", 2)
    assert RunIdentity.from_dict(ident.to_dict()) == ident
    assert ident.cluster_name() == naming.cluster_name_for("d", "t", "r", 2)
    assert ident != RunIdentity("d", "t", "r", 1)


def test_run_identity_is_a_frozen_hashable_value() -> None:
    import dataclasses

    ident = RunIdentity("d", "t", "r", 2)
    assert {ident: 1}[RunIdentity("d", "t", "r", 2)] == 1
    assert len({ident, RunIdentity("d", "t", "r", 2), RunIdentity("d", "t", "r")}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        ident.run_id = "other"  # type: ignore[misc]
