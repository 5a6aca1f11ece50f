"""Hostile inputs to the spec options that had only been spot-checked: the TF1 legacy exec
plan, lineage, TensorBoard and gang scheduling. Each case is refused naming the field
before anything is created, or accepted and still renders (and, for lineage, gives a facet
of plain, bounded values): never a crash, a Python repr in a manifest, or a silent
combination that cannot work."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.render.manifests import render
from airflow_tfk.serving.spec import TensorBoardSpec
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.tensorboard.render import render_tensorboard

TF1: dict[str, Any] = {
    "name": "tf1",
    "image": "img",
    "mode": "between_graph",
    "legacy_tf1_flags": True,
    "command": ["python", "/opt/train.py"],
    "worker": {"replicas": 2},
    "ps": {"replicas": 1},
}
LAUNCH = ["python", "-m", "airflow_tfk.runtime.launch"]


def cluster(**kw: Any) -> Callable[[], object]:
    return lambda: render(TFClusterSpec.from_dict({k: v for k, v in {**TF1, **kw}.items() if v is not ...}))


def tensorboard(**kw: Any) -> Callable[[], object]:
    return lambda: render_tensorboard(TensorBoardSpec.from_dict({"name": "tb", "claim": "logs", **kw}))


#: (case, build, the field it is refused naming; None: accepted)
CASES: list[tuple[str, Callable[[], object], str | None]] = [
    # -- the TF1 legacy exec plan
    ("legacy flag as text", cluster(legacy_tf1_flags="true"), "legacy_tf1_flags"),
    ("legacy flag as 1", cluster(legacy_tf1_flags=1), "legacy_tf1_flags"),
    ("legacy, all_reduce", cluster(mode="all_reduce", ps=...), None),
    ("legacy, parameter_server", cluster(mode="parameter_server", chief={"replicas": 1}), None),
    ("legacy, a shell command", cluster(command=["bash", "-c", 'python /opt/train.py "$@"', "--"]), None),
    ("legacy, the launcher without a program", cluster(command=LAUNCH), "command"),
    ("legacy, the launcher and '--' without a program", cluster(command=[*LAUNCH, "--"]), "command"),
    ("legacy, the launcher with a program", cluster(command=[*LAUNCH, "--", "python", "/opt/t.py"]), None),
    (
        "the launcher, its program in args",
        cluster(legacy_tf1_flags=False, command=LAUNCH, args=["python", "t.py"]),
        None,
    ),
    (
        "the launcher, only options in args",
        cluster(legacy_tf1_flags=False, command=LAUNCH, args=["--x"]),
        "command",
    ),
    ("the launcher, '--' then a flag", cluster(command=[*LAUNCH, "--"], args=["--lr=1"]), "command"),
    (
        "legacy, a role's launcher without a program",
        cluster(worker={"replicas": 2, "command": LAUNCH}),
        "worker.command",
    ),
    ("legacy, its own host flags in args", cluster(args=["--ps_hosts=evil:1", "--job_name=ps"]), None),
    (
        "legacy, 10,000 workers of a shell",
        cluster(command=["sh", "-c", "x"], worker={"replicas": 10000}),
        "worker.replicas",
    ),
    ("legacy, 10,000 workers of a script", cluster(worker={"replicas": 10000}), None),
    # -- gang scheduling
    ("gang, capitalised", cluster(gang_scheduling="Native"), "gang_scheduling"),
    ("gang, a boolean", cluster(gang_scheduling=True), "gang_scheduling"),
    ("gang, with the JobSet layout", cluster(gang_scheduling="native", layout="jobset"), "gang_scheduling"),
    ("gang, under a queue", cluster(gang_scheduling="native", queue_name="team-a"), "gang_scheduling"),
    ("gang, 10,000 workers", cluster(gang_scheduling="native", worker={"replicas": 10000}), None),
    (
        "gang, tolerating lost workers",
        cluster(gang_scheduling="native", mode="parameter_server", chief={"replicas": 1}, max_lost_workers=1),
        None,
    ),
    # -- TensorBoard
    ("tensorboard, uppercase name", tensorboard(name="TB"), "name"),
    ("tensorboard, name with a newline", tensorboard(name="tb\n"), "name"),
    ("tensorboard, name of 57", tensorboard(name="t" * 57), "name"),
    ("tensorboard, name of 56", tensorboard(name="t" * 56), None),
    ("tensorboard, port as text", tensorboard(port="6006"), "port"),
    ("tensorboard, port a boolean", tensorboard(port=True), "port"),
    ("tensorboard, port 65536", tensorboard(port=65536), "port"),
    ("tensorboard, port 0 on Kubernetes", tensorboard(port=0), "port"),
    ("tensorboard, reload 0", tensorboard(reload_seconds=0), "reload_seconds"),
    ("tensorboard, reload a float", tensorboard(reload_seconds=1.5), "reload_seconds"),
    ("tensorboard, claim and base_path", tensorboard(base_path="/logs"), "claim"),
    ("tensorboard, neither", lambda: TensorBoardSpec.from_dict({"name": "tb"}), "claim"),
    ("tensorboard, image with a space", tensorboard(image="tb latest"), "image"),
    ("tensorboard, unknown key", tensorboard(logdir="/x"), "logdir"),
    ("tensorboard, a name that is a number", tensorboard(name=7), "name"),
]


@pytest.mark.parametrize("case,build,field", CASES, ids=[c[0] for c in CASES])
def test_hostile_spec_options(case: str, build: Callable[[], object], field: str | None) -> None:
    if field is None:
        assert build()
        return
    with pytest.raises(SpecError) as err:
        build()
    fields = [e.field for e in getattr(err.value, "errors", [err.value])]
    assert fields[0] == field, (case, err.value)


LINEAGE: list[tuple[str, Any]] = [
    ("nested mode", {"mode": {"a": {"b": 1}}, "image": "img", "worker": {"replicas": 2}}),
    ("huge mode", {"mode": "m" * 1_000_000, "worker": {"replicas": 2}}),
    ("list namespace", {"namespace": ["a"], "layout": {"x": 1}}),
    ("huge replicas", {"worker": {"replicas": 10**100}, "ps": {"replicas": -5}}),
    ("boolean replicas", {"worker": {"replicas": True}}),
    ("image as a mapping", {"image": {"a": 1}, "worker": {"image": ["x"], "replicas": 1}}),
    ("YAML text", "mode: [1, 2\n"),
    (
        "YAML bomb",
        "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b]\n",
    ),
    ("templated", "{{ params.cluster }}"),
    ("a number", 7),
]


@pytest.mark.parametrize("case,spec", LINEAGE, ids=[c[0] for c in LINEAGE])
def test_lineage_reads_any_spec_as_plain_bounded_values(case: str, spec: Any) -> None:
    from airflow_tfk._airflow.lineage import cluster_shape

    shape = cluster_shape(spec)
    assert len(json.dumps(shape)) < 4096, case
    for key in ("mode", "image", "namespace", "layout"):
        assert key not in shape or isinstance(shape[key], str), (case, shape)
    for key in ("replicas", "images"):
        assert all(isinstance(k, str) for k in shape.get(key, {})), (case, shape)
    assert all(
        isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 100_000
        for n in shape.get("replicas", {}).values()
    ), (case, shape)
    assert all(isinstance(i, str) for i in shape.get("images", {}).values()), (case, shape)
