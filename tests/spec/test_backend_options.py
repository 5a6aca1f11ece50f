"""Backend options (``backend_config`` and the backends' constructors): a timeout, an
interval, a grace or a history of zero or less, and a bare string where a list of names
belongs, are refused naming the option, before anything is created; generated from the
one table of the options' kinds, so a new option is covered as it is declared."""

from __future__ import annotations

import math
from typing import Any

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.operator_options import BACKEND_OPTION_RULES, BACKEND_OPTIONS, backend_config_arg

BAD: dict[str, list[Any]] = {
    "seconds": [0, 0.0, -1, -0.5, math.nan, math.inf, True, "5", 10**30],
    "count": [0, -1, 1.5, True, "3", 10**30],
    "names": ["PATH", "", [1], [""], {"PATH": 1}],
    "bool": ["yes", 1, 0],
    "str": [5, ["x"]],
    "path": [5, "a\0b"],
}
GOOD: dict[str, Any] = {
    "seconds": 0.5,
    "count": 2,
    "names": ["PATH", "HOME"],
    "bool": True,
    "str": "x",
    "path": "/x",
}
CASES = [
    (kind, name, value)
    for kind, rules in BACKEND_OPTION_RULES.items()
    for name, (what, _, _) in rules.items()
    for value in BAD[what]
]


def _construct(kind: str, options: dict[str, Any]) -> None:
    if kind == "local":
        from airflow_tfk.backends.local.backend import LocalBackend

        LocalBackend(**options)
    else:
        from airflow_tfk.backends.kubernetes.backend import KubernetesBackend

        KubernetesBackend(**options)


def test_every_option_has_a_rule() -> None:
    assert {k: tuple(v) for k, v in BACKEND_OPTION_RULES.items()} == BACKEND_OPTIONS


@pytest.mark.parametrize(("kind", "name", "value"), CASES, ids=[f"{k}-{n}-{v!r:.20}" for k, n, v in CASES])
def test_a_bad_option_is_refused_naming_it(kind: str, name: str, value: Any) -> None:
    with pytest.raises(SpecError) as err:
        backend_config_arg({name: value}, kind)
    assert err.value.field.startswith(f"backend_config.{name}")
    if name == "max_tasks":
        return  # the constructor's own LocalMachineError names it (tests/backends/local)
    with pytest.raises(SpecError) as err:
        _construct(kind, {name: value})
    assert err.value.field.startswith(f"backend_config.{name}")


@pytest.mark.parametrize("kind", sorted(BACKEND_OPTION_RULES))
def test_good_options_pass(kind: str, tmp_path) -> None:
    options = {name: GOOD[what] for name, (what, _, _) in BACKEND_OPTION_RULES[kind].items()}
    if kind == "local":
        options.update(root=str(tmp_path), workdir=str(tmp_path))
    else:
        options.update(in_cluster=None, config_file=None)
    backend_config_arg(options, kind)
    _construct(kind, options)


def test_start_timeout_zero_is_refused_by_the_operator_at_parse_time() -> None:
    from airflow_tfk.operators.training import TFTrainingOperator

    spec = {"image": "x", "command": ["python", "t.py"], "worker": {"replicas": 1}, "mode": "all_reduce"}
    with pytest.raises(SpecError) as err:
        TFTrainingOperator(
            task_id="t", backend="local", cluster_spec=spec, backend_config={"start_timeout_seconds": 0}
        )
    assert err.value.field == "backend_config.start_timeout_seconds"


def _serving(**kw: Any) -> None:
    from airflow_tfk.serving.spec import ServingSpec

    ServingSpec(model_name="m", base_path="/m", **kw)


def _cluster(**kw: Any) -> None:
    from airflow_tfk.spec.cluster import TFClusterSpec

    base = {"name": "x", "image": "i", "command": ["python", "t.py"], "mode": "all_reduce"}
    TFClusterSpec.from_dict({**base, "worker": {"replicas": 1}, **kw})


NAME_LISTS = [
    ("env_allowlist", lambda v: backend_config_arg({"env_allowlist": v}, "local")),
    ("image_pull_secrets", lambda v: _serving(image_pull_secrets=v)),
    ("image_pull_secrets", lambda v: _cluster(image_pull_secrets=v)),
    ("command", lambda v: _cluster(command=v)),
    ("args", lambda v: _cluster(args=v)),
]


@pytest.mark.parametrize("value", ["PATH", "ab", "x"])
@pytest.mark.parametrize(
    ("field", "build"), NAME_LISTS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(NAME_LISTS)]
)
def test_no_list_of_names_takes_a_bare_string(field: str, build: Any, value: str) -> None:
    with pytest.raises(SpecError) as err:
        build(value)
    assert err.value.field.endswith(field)
