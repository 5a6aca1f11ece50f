"""Every DAG in dags/ parses with zero import errors, and has the shape its doc promises."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory, monkeypatch_module: pytest.MonkeyPatch):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


@pytest.fixture(scope="module")
def monkeypatch_module():
    """The example DAGs as the quickstart's ``airflow-tfk airflow`` parses them: on the
    local backend, which it chooses by name (the provider's default is Kubernetes)."""
    import importlib

    from airflow_tfk import dag_env

    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    mp.setenv("TFK_BACKEND", "local")
    importlib.reload(dag_env)
    yield mp
    mp.undo()
    importlib.reload(dag_env)


def test_no_import_errors(dagbag) -> None:
    assert dagbag.import_errors == {}


def test_expected_dags(dagbag) -> None:
    assert {"tfk_quickstart", "tfk_scheduled_training", "tfk_ui_training", "tfk_train_publish"} <= set(
        dagbag.dag_ids
    )


def test_regression_dag_trains_with_an_evaluator_and_publishes_its_own_version(dagbag) -> None:
    dag = dagbag.dags["tfk_regression"]
    train, publish = dag.get_task("train"), dag.get_task("publish")
    assert train.cluster_spec["evaluator"] == {"replicas": 1}
    assert publish.upstream_task_ids == {"train"}
    assert publish.version is None  # the version train exports, from its XCom


def test_scheduled_training_policies(dagbag) -> None:
    dag = dagbag.dags["tfk_scheduled_training"]
    train = dag.get_task("train")
    assert train.execution_timeout is not None
    assert train.cluster_spec["max_duration_seconds"] == train.execution_timeout.total_seconds()
    assert dag.params["previous_run_policy"] == "kill_previous"
    assert dag.params["ps_grace_seconds"] == 30  # the spec's default, unless a run says otherwise
    assert train.cluster_spec["ps_grace_seconds"] == "{{ params.ps_grace_seconds }}"
    assert dag.timetable.expression == "0 */2 * * *"


def test_ui_training_form_rejects_bad_values(dagbag) -> None:
    from airflow.sdk.definitions.param import ParamValidationError

    params = dagbag.dags["tfk_ui_training"].params
    params.validate()  # the defaults are valid
    for key, bad in [
        ("workers", -1),
        ("workers", 0),
        ("mode", "mirrored"),
        ("image", "a b"),
        ("image", "{{ evil }}"),
        ("steps", "many"),
        ("ps_grace_seconds", -1),
    ]:
        with pytest.raises(ParamValidationError):
            params.get_param(key).resolve(bad)


LIST_OPERATORS = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder="dags")
assert not bag.import_errors, bag.import_errors
print(json.dumps({
    f"{dag.dag_id}.{t.task_id}": [t.backend, t.kubernetes_conn_id, getattr(t, "deferrable", None)]
    for dag in bag.dags.values() if dag.dag_id not in ("tfk_quickstart", "tfk_orphan_sweeper")
    for t in dag.tasks if type(t).__module__.startswith("airflow_tfk.operators")
}))
"""


def test_the_environment_reaches_every_operator_through_default_args() -> None:
    """TFK_BACKEND and TFK_KUBERNETES_CONN_ID are read once (airflow_tfk.dag_env) and reach
    each operator as its DAG's default_args; Airflow's [operators] default_deferrable
    reaches every training."""
    import json
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "TFK_BACKEND": "kubernetes",
        "TFK_KUBERNETES_CONN_ID": "k8s_team",
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "true",
    }
    out = subprocess.run(
        [sys.executable, "-c", LIST_OPERATORS], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    ops = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"tfk_train_publish.train", "tfk_regression.publish", "tfk_ui_training.tensorboard"} <= set(ops)
    for task, (backend, conn_id, deferrable) in ops.items():
        assert (backend, conn_id) == ("kubernetes", "k8s_team"), task
        if task.endswith(".train"):
            assert deferrable is True, task


def test_sweep_dag_publishes_the_best_trial_behind_a_quality_gate(dagbag) -> None:
    dag = dagbag.dags["tfk_sweep"]
    sweep, publish = dag.get_task("sweep"), dag.get_task("publish")
    assert publish.upstream_task_ids == {"sweep"}
    assert publish.version is None  # the best trial's version, from the sweep's XCom
    assert publish.quality_gate["thresholds"] == {"accuracy": "{{ params.min_accuracy }}"}
    assert sweep.sweep["pruner"]["name"] == "median"
    assert "tfk_learning_rate" in sweep.sweep["search_space"]


def test_ui_training_form_caps_what_the_local_backend_runs(dagbag) -> None:
    """On the local backend (chosen by the fixture) every task is a process of this machine: the
    form offers no more than the backend's cap, and validate refuses a sum over it."""
    from airflow.sdk.definitions.param import ParamValidationError

    from airflow_tfk.core.errors import LocalMachineError
    from airflow_tfk.spec.capacity import local_max_tasks

    cap = local_max_tasks()
    dag = dagbag.dags["tfk_ui_training"]
    for key, bad in [("workers", 600), ("ps", 64), ("workers", cap + 1), ("ps", cap + 1)]:
        with pytest.raises(ParamValidationError):
            dag.params.get_param(key).resolve(bad)
    assert str(cap) in dag.params.get_param("workers").description
    validate = dag.get_task("validate").python_callable
    params = {**{k: dag.params[k] for k in dag.params}, "workers": cap, "ps": 1}
    with pytest.raises(LocalMachineError, match=f"cap of {cap}") as err:
        validate(params=params)
    assert err.value.field == "worker.replicas"
    assert "local backend" in str(err.value)
    validate(params={**params, "workers": cap - 2})  # chief + ps + workers = cap fits
