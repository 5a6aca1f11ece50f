"""Asset names and URIs: one spelling per data set, model and serving model, built from
the same words by the producer and the consumer."""

from __future__ import annotations

import pytest

from airflow_tfk._airflow.assets import (
    data_asset,
    model_asset,
    model_name_of_args,
    publish_assets,
    serving_asset,
    training_assets,
)
from airflow_tfk.core.errors import SpecError


def test_uris_groups_and_names() -> None:
    data = data_asset("tfk-data", "digits/train/", namespace="ml")
    assert data.uri == "x-tfk-pvc://tfk-data/digits/train?namespace=ml"
    assert (data.name, data.group) == (data.uri, "dataset")
    model = model_asset("digits", claim="tfk-models", sub_path="team-a", namespace="ml")
    assert model.uri == "x-tfk-pvc://tfk-models/team-a/digits?namespace=ml"
    assert (model.group, model.extra) == ("model", {"model_name": "digits"})
    assert model_asset("digits", base_path="/srv/models/").uri == "file:///srv/models/digits"
    assert serving_asset("digits", namespace="ml").uri == "x-tfk-serving://ml/digits"
    assert serving_asset("digits", backend="local").uri == "x-tfk-serving://local/digits"


def test_an_unsaid_namespace_is_the_deployments(monkeypatch) -> None:
    import airflow_tfk.dag_env as defaults

    monkeypatch.setattr(defaults, "NAMESPACE", "team-b")
    assert data_asset("d").uri == "x-tfk-pvc://d?namespace=team-b"
    assert model_asset("m", claim="c") == model_asset("m", claim="c", namespace="team-b")


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: data_asset("tfk-data", "../etc"), "data.path"),
        (lambda: data_asset("tfk-data", "a?b"), "data.path"),
        (lambda: data_asset(), "data.claim"),
        (lambda: data_asset("c", base_path="/x"), "data.claim"),
        (lambda: data_asset(base_path="relative"), "data.base_path"),
        (lambda: model_asset("a/b", claim="c"), "model.model_name"),
        (lambda: model_asset("m", claim="c", namespace="x y"), "model.namespace"),
        (lambda: serving_asset(""), "serving.model_name"),
    ],
)
def test_bad_words_name_their_field(make, field) -> None:
    with pytest.raises(SpecError) as info:
        make()
    assert info.value.field == field


def test_model_name_of_args() -> None:
    assert model_name_of_args(["--tfk_steps", "5", "--tfk_model_name", "digits"]) == "digits"
    assert model_name_of_args(["--tfk_model_name=mnist"]) == "mnist"
    assert model_name_of_args(["--tfk_model_name", "{{ params.model }}"]) is None
    assert model_name_of_args(["--tfk_model_name"]) is None
    assert model_name_of_args("--tfk_model_name digits") is None


def test_training_assets_from_what_the_spec_says_literally() -> None:
    spec = {
        "namespace": "ml",
        "args": ["--tfk_model_name", "digits"],
        "storage": {"data": {"claim": "tfk-data"}, "models": {"claim": "tfk-models"}},
    }
    inlets, outlets = training_assets(spec)
    assert [a.uri for a in inlets] == ["x-tfk-pvc://tfk-data?namespace=ml"]
    assert [a.uri for a in outlets] == ["x-tfk-pvc://tfk-models/digits?namespace=ml"]
    templated = {**spec, "storage": {"models": {"claim": "{{ params.claim }}"}}}
    assert training_assets(templated) == ([], [])
    assert training_assets({**spec, "args": []})[1] == []
    assert training_assets("image: x\n") == ([], [])


def test_publish_assets() -> None:
    inlets, outlets = publish_assets("digits", "tfk-models", "", None, {"namespace": "ml"}, "kubernetes")
    assert [a.uri for a in inlets] == ["x-tfk-pvc://tfk-models/digits?namespace=ml"]
    assert [a.uri for a in outlets] == ["x-tfk-serving://ml/digits"]
    _, local = publish_assets("digits", None, "", "/srv/models", None, "local")
    assert [a.uri for a in local] == ["x-tfk-serving://local/digits"]
    assert publish_assets("{{ params.m }}", "c", "", None, None, "local") == ([], [])
