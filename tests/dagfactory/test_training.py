"""The training file format: each block is checked by its owner and errors name the field
as written in the file, with its line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dagfactory.loader import TrainingFileError, read_training
from airflow_tfk.dagfactory.params import with_param_defaults
from airflow_tfk.dagfactory.training import parse_training

CLUSTER = {
    "image": "airflow-tfk/training:2.21.0",
    "mode": "all_reduce",
    "command": ["python", "train.py"],
    "worker": {"replicas": 2},
}


def parse(**data):
    return parse_training({"cluster": dict(CLUSTER), **data}, default_dag_id="t", source="t.yaml")


def error(**data) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse(**data)
    return info.value


def test_minimal_file_defaults() -> None:
    t = parse()
    assert (t.dag_id, t.schedule, t.previous_run_policy, t.retries, t.owners) == (
        "t",
        None,
        "allow",
        0,
        ("airflow",),
    )
    assert t.max_active_runs == 1 and t.publish is None and t.tensorboard is None


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"shedule": "@daily"}, "shedule", "unknown key"),
        ({"schedule": "@dayly"}, "schedule", "unknown preset"),
        ({"previous_run_policy": "kill"}, "previous_run_policy", "must be one of"),
        ({"backend": "docker"}, "backend", "must be one of kubernetes, local"),
        ({"retries": -1}, "retries", "between 0 and 100"),
        ({"max_duration_minutes": 0}, "max_duration_minutes", "between 1"),
        ({"dag_id": "a b"}, "dag_id", "letters, digits"),
        ({"owners": [""]}, "owners[0]", "non-empty"),
        ({"catchup": "yes"}, "catchup", "true or false"),
        ({"start_date": "tomorrow"}, "start_date", "a date"),
        ({"params": {"steps": {"default": 1, "minimun": 0}}}, "params.steps.minimun", "unknown key"),
        ({"params": {"bad-name": 1}}, "params.bad-name", "letters, digits"),
        ({"publish": {"model": "x"}}, "publish.model", "unknown key (did you mean 'model_name'? allowed: "),
        ({"publish": {"claim": "c"}}, "publish.model_name", "is required"),
        ({"publish": "yes"}, "publish", "true, false or a mapping"),
        ({"tensorboard": True}, "tensorboard.claim", "is required"),
        ({"tensorboard": {"image": "x"}}, "tensorboard.image", "unknown key"),
    ],
)
def test_dag_level_errors_name_the_field(data: dict, field: str, words: str) -> None:
    exc = error(**data)
    assert exc.field == field and words in str(exc), str(exc)


def test_cluster_block_is_validated_by_the_spec_itself() -> None:
    exc = error(cluster={**CLUSTER, "worker": {"replicas": 0}})
    assert (exc.field, exc.rule) == ("cluster.worker.replicas", "must be between 1 and 10000")
    assert error(cluster={**CLUSTER, "ps": {"replicas": 1}}).field == "cluster.ps"
    assert error(cluster={**CLUSTER, "wrker": {}}).field == "cluster.wrker"
    assert error(cluster={k: v for k, v in CLUSTER.items() if k != "image"}).field == "cluster.image"
    assert error(cluster=None).field == "cluster"


def test_generated_cluster_name_is_length_checked() -> None:
    # 10,000 workers need 'worker-9999' after the derived name: still a DNS label.
    assert parse(cluster={**CLUSTER, "worker": {"replicas": 10_000}})
    long_name = "n" * 55
    exc = error(cluster={**CLUSTER, "name": long_name, "worker": {"replicas": 10_000}})
    assert exc.field == "cluster.name" and "too long" in exc.rule


def test_params_shorthand_and_references() -> None:
    t = parse(
        params={"workers": 3, "lr": 0.1, "fast": True, "tag": "x"},
        cluster={**CLUSTER, "worker": {"replicas": "{{ params.workers }}"}, "args": ["--lr={{ params.lr }}"]},
    )
    assert t.params["workers"] == {"default": 3, "type": "integer"}
    assert t.params["lr"]["type"] == "number" and t.params["fast"]["type"] == "boolean"
    assert t.cluster["worker"]["replicas"] == "{{ params.workers }}"  # rendered at run time
    assert with_param_defaults(t.cluster, t.params)["worker"]["replicas"] == 3


def test_param_defaults_are_checked_through_the_spec() -> None:
    exc = error(params={"workers": 0}, cluster={**CLUSTER, "worker": {"replicas": "{{ params.workers }}"}})
    assert exc.field == "cluster.worker.replicas" and exc.value == 0


def test_undeclared_param_reference() -> None:
    exc = error(cluster={**CLUSTER, "args": ["--steps", "{{ params.stepz }}"]})
    assert exc.field == "cluster.args[1]" and "params.stepz" in exc.rule
    assert error(publish={"model_name": "{{ params.m }}"}).field == "publish.model_name"


def test_max_duration_sets_and_bounds_the_cluster_deadline() -> None:
    assert parse(max_duration_minutes=5).cluster["max_duration_seconds"] == 300
    exc = error(max_duration_minutes=5, cluster={**CLUSTER, "max_duration_seconds": 301})
    assert exc.field == "cluster.max_duration_seconds" and "max_duration_minutes" in exc.rule
    assert parse(max_duration_minutes=5, cluster={**CLUSTER, "max_duration_seconds": 60})


def test_policy_other_than_allow_lets_the_next_run_start() -> None:
    assert parse(previous_run_policy="kill_previous").max_active_runs == 2
    assert parse(previous_run_policy="skip", max_active_runs=1).max_active_runs == 1


def test_publish_and_tensorboard_claims_default_to_the_cluster_volumes() -> None:
    storage = {"logs": {"claim": "tfk-logs"}, "models": {"claim": "tfk-models"}}
    t = parse(cluster={**CLUSTER, "storage": storage}, tensorboard=True, publish={"model_name": "m"})
    assert t.tensorboard == {"claim": "tfk-logs", "tensorboard": {"namespace": "default"}}
    assert t.publish == {"claim": "tfk-models", "model_name": "m", "serving": {"namespace": "default"}}
    local = parse(cluster={**CLUSTER, "storage": storage}, tensorboard={"base_path": "/tmp/logs"})
    assert "claim" not in local.tensorboard  # a local directory instead of the claim


def test_namespace_defaults_to_the_deployments(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_tfk import dag_env

    monkeypatch.setattr(dag_env, "NAMESPACE", "tfk")
    t = parse(publish={"model_name": "m", "serving": {"replicas": 2}}, tensorboard={"claim": "c"})
    assert t.cluster["namespace"] == "tfk"
    assert t.publish["serving"] == {"namespace": "tfk", "replicas": 2}
    assert t.tensorboard["tensorboard"] == {"namespace": "tfk"}
    assert parse(cluster={**CLUSTER, "namespace": "ml"}).cluster["namespace"] == "ml"


def test_publish_accepts_every_keyword_of_the_operator() -> None:
    """Options added to TFPublishModelOperator (e.g. a quality gate) pass through unchanged."""
    import inspect

    from airflow_tfk.operators.serving import TFPublishModelOperator

    keywords = {
        n
        for n, p in inspect.signature(TFPublishModelOperator.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    } - {"backend", "backend_config", "kubernetes_conn_id"}
    options = {k: None for k in keywords} | {"model_name": "m", "serving": {"namespace": "ns"}}
    assert parse(publish=options).publish == options


def test_read_training_points_at_the_line(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("cluster:\n  image: i\n  command: [a]\n  worker:\n    replicas: -3\n")
    with pytest.raises(TrainingFileError) as info:
        read_training(path)
    assert str(info.value) == f"{path}:5: cluster.worker.replicas: must be between 1 and 10000 (got -3)"
    path.write_bytes(b"cluster: \xff\n")
    with pytest.raises(TrainingFileError, match="is not UTF-8"):
        read_training(path)


def test_a_relative_template_dir_is_beside_the_training_file(tmp_path: Path) -> None:
    training = parse_training(
        {"cluster": {**CLUSTER, "template_dir": "templates"}},
        default_dag_id="t",
        source=str(tmp_path / "t.yaml"),
    )
    assert training.cluster["template_dir"] == str(tmp_path / "templates")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("/", "must be relative"),
        ("/etc", "must be relative"),
        ("/opt/tfk-templates", "must be relative"),
        ("out", "must stay inside"),  # a symbolic link in the folder that leads out of it
        ("out/sub", "must stay inside"),
        ("{{ params.dir }}", "cannot be templated"),
        ("../..", "'..'"),  # the spec's own rule
        ("templates/../../x", "'..'"),
        ("", "empty"),
    ],
)
def test_a_template_dir_that_leaves_the_trainings_folder_is_refused(
    tmp_path: Path, value: str, why: str
) -> None:
    """``template_dir: /`` with ``{% include 'etc/passwd' %}`` in an override would read the
    worker's files: the renderer confines templates to their folder, and the folder must
    stay inside the repository's trainings folder."""
    root = tmp_path / "trainings"
    (root / "team").mkdir(parents=True)
    (root / "team" / "out").symlink_to(tmp_path.parent)
    with pytest.raises(SpecError) as info:
        parse_training(
            {
                "cluster": {**CLUSTER, "template_dir": value},
                "params": {"dir": {"default": "/", "type": "string"}},
            },
            default_dag_id="t",
            source=str(root / "team" / "t.yaml"),
            root=str(root),
        )
    assert info.value.field == "cluster.template_dir"
    assert why in str(info.value)


def test_a_template_dir_elsewhere_in_the_trainings_folder_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "trainings"
    (root / "team").mkdir(parents=True)
    (root / "shared-templates").mkdir()
    (root / "team" / "link").symlink_to(root / "shared-templates")
    for value in ("link", "link/."):
        training = parse_training(
            {"cluster": {**CLUSTER, "template_dir": value}},
            default_dag_id="t",
            source=str(root / "team" / "t.yaml"),
            root=str(root),
        )
        assert os.path.realpath(training.cluster["template_dir"]) == str(root / "shared-templates")


def test_a_publish_of_another_model_than_the_args_export_is_refused() -> None:
    """Both names are written in the file: the run could only fail after its training (or
    publish an older version left under the publish's name), so the file is refused."""
    cluster = {**CLUSTER, "args": ["--tfk_model_name", "digits_v2"], "storage": {"models": {"claim": "m"}}}
    data = {"cluster": cluster, "publish": {"model_name": "digits"}}
    with pytest.raises(SpecError) as info:
        parse_training(data, default_dag_id="t", source="t.yaml")
    assert info.value.field == "publish.model_name"
    assert "but cluster.args gives --tfk_model_name 'digits_v2'" in info.value.rule
    assert parse_training({**data, "publish": {"model_name": "digits_v2"}}, default_dag_id="t", source="t")
    # a sweep's search space may not name the model (the winner is published by its name)
    sweep = {"n_trials": 2, "search_space": {"tfk_model_name": {"type": "categorical", "choices": ["a"]}}}
    with pytest.raises(SpecError, match="sweep.search_space.tfk_model_name"):
        parse_training(
            {**data, "publish": {"model_name": "digits_v2"}, "sweep": sweep}, default_dag_id="t", source="t"
        )
