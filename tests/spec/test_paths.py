"""Every path a spec field names goes through one rule (``_spec_checks.path_text``): a
backslash, NUL, a newline or another control character, a '..' segment, a path over
PATH_MAX, and an absolute path where a path inside a volume is meant (or a relative one
where a mount point is), are refused naming the field, whichever field it is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.sweep.config import SweepConfig

CLUSTER: dict[str, Any] = {
    "name": "t1",
    "image": "img",
    "command": ["python", "train.py"],
    "mode": "all_reduce",
    "worker": {"replicas": 2},
}


def _cluster(**kw: Any) -> Callable[[str], object]:
    return lambda v: TFClusterSpec.from_dict({**CLUSTER, **_fill(kw, v)})


def _fill(value: Any, v: str) -> Any:
    if value == "<>":
        return v
    if isinstance(value, dict):
        return {k: _fill(x, v) for k, x in value.items()}
    if isinstance(value, list):
        return [_fill(x, v) for x in value]
    return value


def _model(v: str) -> object:
    from airflow_tfk._airflow.assets import model_asset

    return model_asset("digits", base_path=v)


_VOLUME = [{"name": "creds", "secret": {"secretName": "s"}}]
#: (field as the error names it, kind, build a spec with the path)
FIELDS: list[tuple[str, str, Callable[[str], object]]] = [
    ("sub_path", "relative", lambda v: ServingSpec(model_name="m", claim="models", sub_path=v)),
    ("sub_path", "relative", lambda v: TensorBoardSpec(name="tb", claim="logs", sub_path=v)),
    ("base_path", "any", lambda v: ServingSpec(model_name="m", base_path=v)),
    ("base_path", "any", lambda v: TensorBoardSpec(name="tb", base_path=v)),
    ("template_dir", "any", _cluster(template_dir="<>")),
    (
        "pod.volume_mounts[0].mountPath",
        "absolute",
        _cluster(pod={"volumes": _VOLUME, "volume_mounts": [{"name": "creds", "mountPath": "<>"}]}),
    ),
    (
        "pod.volume_mounts[0].subPath",
        "relative",
        _cluster(
            pod={"volumes": _VOLUME, "volume_mounts": [{"name": "creds", "mountPath": "/c", "subPath": "<>"}]}
        ),
    ),
    (
        "pod.volume_mounts[0].subPathExpr",
        "relative",
        _cluster(
            pod={
                "volumes": _VOLUME,
                "volume_mounts": [{"name": "creds", "mountPath": "/c", "subPathExpr": "<>"}],
            }
        ),
    ),
    (
        "pod.sidecars[0].volumeMounts[0].subPath",
        "relative",
        _cluster(
            pod={
                "volumes": _VOLUME,
                "sidecars": [
                    {
                        "name": "agent",
                        "image": "busybox",
                        "volumeMounts": [{"name": "creds", "mountPath": "/c", "subPath": "<>"}],
                    }
                ],
            }
        ),
    ),
    (
        "worker.pod.volume_mounts[0].subPath",
        "relative",
        _cluster(
            worker={
                "replicas": 2,
                "pod": {
                    "volumes": _VOLUME,
                    "volume_mounts": [{"name": "creds", "mountPath": "/c", "subPath": "<>"}],
                },
            }
        ),
    ),
    (
        "sweep.storage",
        "any",
        lambda v: SweepConfig.from_dict(
            {"n_trials": 1, "search_space": {"lr": {"low": 0.1, "high": 1.0}}, "storage": v}
        ),
    ),
    ("model.base_path", "absolute", _model),
]
GOOD = {"relative": "models/v1", "absolute": "/mnt/models", "any": "/mnt/models"}
BAD = [
    ("backslash", "models\\v1", "backslash"),
    ("Windows path", "C:\\models", "backslash"),
    ("NUL", "models\x00v1", "NUL"),
    ("newline", "models\nv1", "newline"),
    ("carriage return", "models\rv1", "carriage return"),
    ("tab", "models\tv1", "control character"),
    ("'..' inside", "models/../v1", "'..'"),
    ("'..' first", "../models", "'..'"),
    ("'..' alone", "..", "'..'"),
    ("'..' last", "models/..", "'..'"),
    ("over PATH_MAX", "m" * 4097, "4096"),
]


@pytest.mark.parametrize("field,kind,build", FIELDS, ids=[f"{f[0]}-{i}" for i, f in enumerate(FIELDS)])
def test_every_path_field_takes_a_plain_path(field: str, kind: str, build: Callable[[str], object]) -> None:
    build(GOOD[kind])


@pytest.mark.parametrize("what,value,said", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("field,kind,build", FIELDS, ids=[f"{f[0]}-{i}" for i, f in enumerate(FIELDS)])
def test_every_path_field_refuses_what_no_path_should_carry(
    field: str, kind: str, build: Callable[[str], object], what: str, value: str, said: str
) -> None:
    if kind == "absolute":
        value = "/" + value
    with pytest.raises(SpecError) as err:
        build(value)
    errors = getattr(err.value, "errors", [err.value])
    assert [e.field for e in errors] == [field], (what, errors)
    assert said in str(errors[0]), (what, errors[0])


@pytest.mark.parametrize("field,kind,build", FIELDS, ids=[f"{f[0]}-{i}" for i, f in enumerate(FIELDS)])
def test_a_path_inside_a_volume_is_relative_and_a_mount_point_absolute(
    field: str, kind: str, build: Callable[[str], object]
) -> None:
    if kind == "any":
        return
    wrong = "/models/v1" if kind == "relative" else "models/v1"
    with pytest.raises(SpecError) as err:
        build(wrong)
    errors = getattr(err.value, "errors", [err.value])
    assert [e.field for e in errors] == [field], errors
