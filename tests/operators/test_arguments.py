"""Operator, sensor and trigger arguments: a bad one is a SpecError naming it, raised in
``__init__`` (so at DAG parse time, before anything exists); a templated one is checked
again as rendered, in ``execute``, before anything is created."""

from __future__ import annotations

import inspect
import time

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators.cluster import (
    TFCreateClusterOperator,
    TFDeleteClusterOperator,
    TFDeleteParameterServersOperator,
)
from airflow_tfk.operators.serving import TFPublishModelOperator, TFStopModelServerOperator
from airflow_tfk.operators.sweeper import TFSweepOrphansOperator
from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator
from airflow_tfk.operators.training import TFTrainingOperator
from airflow_tfk.sensors.cluster import TFClusterSensor
from airflow_tfk.spec.operator_options import BACKEND_OPTIONS
from airflow_tfk.triggers.cluster import TFClusterDoneTrigger
from tests.helpers import spec_dict, task_context

SPEC = {"image": "x", "command": ["python", "t.py"], "ps": {"replicas": 1}, "worker": {"replicas": 1}}
HANDLE = {"name": "c", "namespace": "default", "backend": "local", "mode": "between_graph"}


def training(**kw):
    kw.setdefault("cluster_spec", SPEC)
    return TFTrainingOperator(task_id="train", backend="local", **kw)


def publish(**kw):
    return TFPublishModelOperator(task_id="publish", backend="local", model_name="m", base_path="/m", **kw)


CASES = [
    # (id, build, the field the error names)
    ("spec-none", lambda: training(cluster_spec=None), "cluster_spec"),
    ("spec-int", lambda: training(cluster_spec=42), "cluster_spec"),
    ("spec-bytes", lambda: training(cluster_spec=b"name: x"), "cluster_spec"),
    ("spec-list", lambda: training(cluster_spec=[("name", "x")]), "cluster_spec"),
    ("spec-set", lambda: training(cluster_spec={"a", "b"}), "cluster_spec"),
    ("spec-mixed-keys", lambda: training(cluster_spec={**SPEC, 1: "x", "b": 2}), "cluster_spec"),
    (
        "spec-np-mixed-keys",
        lambda: training(cluster_spec={**SPEC, "network_policy": {1: True, "x": 1}}),
        "cluster_spec.network_policy",
    ),
    ("spec-huge-int", lambda: training(cluster_spec={**SPEC, "port": 10**400}), "cluster_spec.port"),
    ("spec-nan", lambda: training(cluster_spec={**SPEC, "port": float("nan")}), "cluster_spec.port"),
    ("spec-object", lambda: training(cluster_spec={**SPEC, "image": object()}), "cluster_spec.image"),
    ("spec-million-args", lambda: training(cluster_spec={**SPEC, "args": ["x"] * 1_000_000}), "cluster_spec"),
    ("spec-deep", lambda: training(cluster_spec=_deep(200)), "cluster_spec"),
    ("backend-config-str", lambda: training(backend_config="root=/tmp"), "backend_config"),
    ("backend-config-list", lambda: training(backend_config=[1]), "backend_config"),
    ("backend-config-unknown", lambda: training(backend_config={"rooot": "/tmp"}), "backend_config.rooot"),
    (
        "backend-config-k8s-key-on-local",
        lambda: training(backend_config={"conn_id": "k"}),
        "backend_config.conn_id",
    ),
    ("backend-config-mixed-keys", lambda: training(backend_config={1: 2, "root": "/x"}), "backend_config"),
    ("backend-int", lambda: TFTrainingOperator(task_id="t", cluster_spec=SPEC, backend=5), "backend"),
    ("progress-abc", lambda: training(progress_interval="abc"), "progress_interval"),
    ("progress-zero", lambda: training(progress_interval=0), "progress_interval"),
    ("progress-inf", lambda: training(progress_interval=float("inf")), "progress_interval"),
    ("progress-huge", lambda: training(progress_interval=10**400), "progress_interval"),
    ("progress-bool", lambda: training(progress_interval=True), "progress_interval"),
    ("deferrable-str", lambda: training(deferrable="yes"), "deferrable"),
    ("name-prefix-upper", lambda: training(name_prefix="TFK"), "name_prefix"),
    ("name-prefix-int", lambda: training(name_prefix=3), "name_prefix"),
    ("name-prefix-long", lambda: training(name_prefix="a" * 40), "name_prefix"),
    ("tensorboard-task-id", lambda: training(tensorboard_task_id=None), "tensorboard_task_id"),
    ("conn-id-int", lambda: training(kubernetes_conn_id=5), "kubernetes_conn_id"),
    (
        "create-spec-none",
        lambda: TFCreateClusterOperator(task_id="c", backend="local", cluster_spec=None),
        "cluster_spec",
    ),
    ("cleanup-cluster-int", lambda: TFDeleteParameterServersOperator(task_id="c", cluster=42), "cluster"),
    (
        "cleanup-grace-str",
        lambda: TFDeleteParameterServersOperator(task_id="c", cluster=HANDLE, grace_seconds="1"),
        "grace_seconds",
    ),
    ("delete-cluster-list", lambda: TFDeleteClusterOperator(task_id="d", cluster=[1]), "cluster"),
    (
        "delete-capture-str",
        lambda: TFDeleteClusterOperator(task_id="d", cluster=HANDLE, capture_logs="no"),
        "capture_logs",
    ),
    ("sensor-cluster-none", lambda: TFClusterSensor(task_id="s", cluster=None), "cluster"),
    (
        "sensor-progress-abc",
        lambda: TFClusterSensor(task_id="s", cluster=HANDLE, progress_interval="abc"),
        "progress_interval",
    ),
    (
        "sweep-namespace-int",
        lambda: TFSweepOrphansOperator(task_id="w", backend="local", namespace=5),
        "namespace",
    ),
    (
        "sweep-namespace-bad",
        lambda: TFSweepOrphansOperator(task_id="w", backend="local", namespace="Bad NS"),
        "namespace",
    ),
    (
        "sweep-report-only-str",
        lambda: TFSweepOrphansOperator(task_id="w", backend="local", report_only="no"),
        "report_only",
    ),
    ("publish-serving-mixed", lambda: publish(serving={1: "a", "b": 2}), "serving"),
    ("publish-serving-str", lambda: publish(serving="replicas: 2"), "serving"),
    (
        "publish-gate-mixed",
        lambda: publish(quality_gate={"thresholds": {1: 0.5, "acc": 0.5}}),
        "quality_gate.thresholds",
    ),
    (
        "publish-gate-huge",
        lambda: publish(quality_gate={"thresholds": {"acc": 10**400}}),
        "quality_gate.thresholds.acc",
    ),
    (
        "publish-gate-inf",
        lambda: publish(quality_gate={"max_regression": float("inf")}),
        "quality_gate.max_regression",
    ),
    ("publish-metrics-huge", lambda: publish(metrics={"acc": 10**400}), "metrics.acc"),
    ("publish-metrics-list", lambda: publish(metrics=[1]), "metrics"),
    ("publish-sample-list", lambda: publish(sample_request=[1]), "sample_request"),
    (
        "publish-model-name-int",
        lambda: TFPublishModelOperator(task_id="p", backend="local", model_name=5),
        "model_name",
    ),
    ("publish-version-float", lambda: publish(version=1.5), "version"),
    ("publish-version-list", lambda: publish(version=[1]), "version"),
    ("publish-config-unknown", lambda: publish(backend_config={"nope": 1}), "backend_config.nope"),
    (
        "stop-serving-mixed",
        lambda: TFStopModelServerOperator(backend="local", model_name="m", serving={1: "x", "a": 1}),
        "serving",
    ),
    (
        "tb-options-mixed",
        lambda: TFStartTensorBoardOperator(backend="local", base_path="/l", tensorboard={1: "x", "a": 1}),
        "tensorboard",
    ),
    ("tb-claim-int", lambda: TFStartTensorBoardOperator(backend="local", claim=5), "claim"),
]


def _deep(n: int) -> dict:
    node: dict = {}
    root = {**SPEC, "env": node}
    for _ in range(n):
        node["x"] = {}
        node = node["x"]
    return root


@pytest.mark.parametrize(("build", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_arguments_are_refused_in_init_naming_them(build, field) -> None:
    t0 = time.process_time()
    with pytest.raises(SpecError) as err:
        build()
    assert time.process_time() - t0 < 1.0
    assert err.value.field == field or err.value.field.startswith((f"{field}.", f"{field}[")), err.value


def test_the_backend_options_table_is_the_constructors() -> None:
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.backends.local.backend import LocalBackend

    for kind, cls in (("local", LocalBackend), ("kubernetes", KubernetesBackend)):
        params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
        assert tuple(params) == BACKEND_OPTIONS[kind], kind


def test_templated_arguments_pass_init_and_are_checked_as_rendered_before_creation(local_root) -> None:
    op = training(
        cluster_spec="{{ params.spec }}",
        backend_config="{{ params.config }}",
    )
    # rendered without native objects, a mapping template is text: refused before creation
    op.backend_config = "{'root': '/tmp'}"
    with pytest.raises(SpecError) as err:
        op.execute(task_context())
    assert err.value.field == "backend_config"
    op.backend_config = {"rooot": "/tmp"}
    with pytest.raises(SpecError) as err:
        op.execute(task_context())
    assert err.value.field == "backend_config.rooot"
    op.backend_config = None
    op.cluster_spec = 42
    with pytest.raises(SpecError) as err:
        op.execute(task_context())
    assert err.value.field == "cluster_spec"
    assert not any(local_root.rglob("state.json"))


def test_progress_interval_is_refused_before_the_cluster_exists(local_root) -> None:
    with pytest.raises(SpecError):
        training(cluster_spec=spec_dict("between_graph", workers=1), progress_interval="abc")
    assert not any(local_root.rglob("state.json"))


def test_valid_arguments_still_pass() -> None:
    training(backend_config={"root": "/tmp/x", "max_tasks": 4}, progress_interval=0.5, name_prefix="nightly")
    TFTrainingOperator(
        task_id="k", cluster_spec="name: x\n", backend="kubernetes", backend_config={"conn_id": "k"}
    )
    publish(version="{{ ti.xcom_pull('train')['model_version'] }}", quality_gate={"thresholds": {"acc": 0.9}})
    TFSweepOrphansOperator(
        task_id="w", backend="local", namespace="{{ params.ns }}", report_only="{{ params.r }}"
    )
    TFDeleteClusterOperator(task_id="d", cluster=None)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cluster": None}, "cluster"),
        ({"backend_kind": 5}, "backend_kind"),
        ({"backend_config": "x"}, "backend_config"),
        ({"backend_config": {"nope": 1}}, "backend_config.nope"),
        ({"mode": "mirrored"}, "mode"),
        ({"replicas": {"worker": "2"}}, "replicas.worker"),
        ({"deadline": "soon"}, "deadline"),
        ({"progress_interval": "abc"}, "progress_interval"),
        ({"delete_on_kill": "yes"}, "delete_on_kill"),
        ({"owner": "dag.train"}, "owner"),
        ({"owner": {"dag_id": "d", "task_id": "t"}}, "owner"),
    ],
)
def test_trigger_arguments_are_an_error_event_naming_them(changes, field) -> None:
    import asyncio

    kwargs = {
        "cluster": {"name": "c", "namespace": "default"},
        "backend_kind": "local",
        "backend_config": {},
        "mode": "between_graph",
        "replicas": {"worker": 1},
        **changes,
    }
    trigger = TFClusterDoneTrigger(**kwargs)
    assert trigger.invalid is not None and trigger.invalid.field == field

    async def first():
        async for event in trigger.run():
            return event.payload

    event = asyncio.run(first())
    assert event["status"] == "error" and field in event["message"]


def test_sweep_refuses_a_namespace_that_is_not_one(tmp_path) -> None:
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.run.orphans import sweep

    for bad in (5, "Bad NS", b"ns", ["a"]):
        with pytest.raises(SpecError) as err:
            sweep(LocalBackend(str(tmp_path)), bad, lambda identity: None)
        assert err.value.field == "namespace"


@pytest.mark.parametrize("setting", ["true", "false"])
def test_deferrable_defaults_to_airflows_operators_setting(monkeypatch: pytest.MonkeyPatch, setting) -> None:
    """Like the cncf provider's operators, every wait takes ``[operators]
    default_deferrable`` when its DAG says nothing; an explicit argument wins."""
    from airflow_tfk.dagfactory.builder import build_dag
    from airflow_tfk.dagfactory.training import parse_training

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", setting)
    expected = setting == "true"
    dag = build_dag(
        parse_training({"cluster": SPEC, "backend": "local"}, default_dag_id="d", source="d.yaml")
    )
    waits = [training(), TFClusterSensor(task_id="wait", cluster=HANDLE), dag.get_task("train")]
    assert [w.deferrable for w in waits] == [expected] * 3
    assert training(deferrable=not expected).deferrable is (not expected)
    assert TFClusterSensor(task_id="w", cluster=HANDLE, deferrable=not expected).deferrable is (not expected)
