"""Naming rules, label sanitising and the deterministic cluster name."""

from __future__ import annotations

import pytest

from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity

# Each rule with the values it accepts and refuses: one table, one test.
RULES = {
    naming.is_dns1035_label: {
        True: ["a", "imagenet", "a-1", "a" * 63],
        False: ["a" * 64, "1abc", "-a", "a-", "A", "a_b", "a.b", ""],
    },
    naming.is_dns1123_label: {True: ["1abc", "abc"], False: ["a.b", "a" * 64, ""]},
    naming.is_dns1123_subdomain: {
        True: ["a.b.c", "my-secret", "a" * 253],
        False: ["a..b", "A", ".a", "a" * 254],
    },
    naming.is_label_value: {
        True: ["", "abc", "A.b_c-1", "a" * 63],
        False: ["a" * 64, "-a", "a-", "a b", "a/b", "a:b"],
    },
    naming.is_label_key: {
        True: ["team", "example.com/team", "nvidia.com/gpu", "a" * 63],
        False: ["a/b/c", "Example.com/x", "/x", "x/", "", "a" * 64],
    },
    naming.is_env_name: {True: ["HOME", "_x", "a.b-c"], False: ["1X", "A B", "A=B", ""]},
}


@pytest.mark.parametrize(
    "rule, value, ok",
    [(rule, v, ok) for rule, by in RULES.items() for ok, values in by.items() for v in values],
    ids=lambda x: x.__name__ if callable(x) else None,
)
def test_rule(rule, value, ok):
    assert rule(value) is ok


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
