"""The final exec of every task, as the backend builds it, is checked whole before anything
is created: each argument and ``NAME=value`` string in UTF-8 bytes (what the kernel counts),
and all of them together - the spec's command, args and env, the platform's variables and
legacy flags, and a sweep trial's appended flags and variables - against Linux's total
(a quarter of an 8 MiB stack, less room for variables the platform cannot see)."""

from __future__ import annotations

import os
import resource
import subprocess
from typing import Any

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.protocol.exec_limits import MAX_EXEC_BYTES, MAX_STRING_CHARS, exec_bytes
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.launch_plan import EXEC_BUDGET, exec_footprint
from airflow_tfk.sweep.config import SweepConfig
from airflow_tfk.sweep.trials import check_trials_fit, trial_spec

BASE: dict[str, Any] = {
    "name": "t1",
    "image": "img",
    "command": ["python", "train.py"],
    "mode": "all_reduce",
    "worker": {"replicas": 2},
}
CHUNK = 120_000  # one string well under MAX_ARG_STRLEN


def spec(**kw: Any) -> TFClusterSpec:
    return TFClusterSpec.from_dict({**BASE, **kw})


def _container(s: TFClusterSpec, role: str) -> dict:
    job = next(m for m in render(s) if m["kind"] == "Job" and m["metadata"]["name"].endswith(f"-{role}"))
    return job["spec"]["template"]["spec"]["containers"][0]


def _rendered_room(s: TFClusterSpec, role: str) -> int:
    """The exec room of the role's container as rendered (``$(VAR)`` left as written)."""
    c = _container(s, role)
    env = [f"{e['name']}={e.get('value', '')}" for e in c["env"]]
    return exec_bytes([*c["command"], *c.get("args", []), *env])


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"args": ["--x", "y" * 1000], "env": {"A": "b" * 5000}, "metrics_port": 9100},
        {
            "mode": "between_graph",
            "legacy_tf1_flags": True,
            "ps": {"replicas": 3},
            "worker": {"replicas": 40},
        },
        {"worker": {"replicas": 3, "args": ["--own"], "env": {"ROLE_ONLY": "v" * 3000}}},
    ],
)
def test_the_footprint_covers_the_rendered_container(kw: dict[str, Any]) -> None:
    s = spec(**kw)
    for role in s.roles():
        assert exec_footprint(s, role) and sum(exec_footprint(s, role).values()) >= _rendered_room(s, role)


@pytest.mark.parametrize(
    "kw,field",
    [
        # each string under the per-string limit, all together over the total
        (
            {
                "args": ["a" * CHUNK] * 2,
                "env": {f"E{i}": "v" * CHUNK for i in range(2)},
                "worker": {"replicas": 2, "env": {f"W{i}": "w" * CHUNK for i in range(16)}},
            },
            "worker.env",
        ),
        (
            {
                "worker": {
                    "replicas": 2,
                    "args": ["a" * CHUNK] * 2,
                    "env": {f"W{i}": "w" * CHUNK for i in range(16)},
                }
            },
            "worker.env",
        ),
        # bytes, not characters: 50,000 euro signs are 150,000 bytes
        ({"args": ["\u20ac" * 50_000]}, "args[0]"),
        ({"env": {"EURO": "\u20ac" * 50_000}}, "env.EURO"),
    ],
)
def test_an_exec_linux_would_refuse_is_refused_naming_the_field(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        spec(**kw)
    errors = getattr(err.value, "errors", [err.value])
    assert [e.field for e in errors] == [field], errors


def test_just_under_the_budget_is_accepted() -> None:
    base = spec()
    room = sum(exec_footprint(base, "worker").values())
    n = (EXEC_BUDGET - room) // (CHUNK + 16) - 1
    env = {f"W{i:03d}": "w" * CHUNK for i in range(n)}
    s = spec(worker={"replicas": 2, "env": env})
    assert EXEC_BUDGET - 2 * CHUNK < sum(exec_footprint(s, "worker").values()) <= EXEC_BUDGET


#: with model_versions, each trial's flags end in --tfk_model_version=<13 digits>: the longest
#: flags a trial gets, which the fit check must count
SWEEP = {
    "n_trials": 20,
    "search_space": {"tfk_learning_rate": {"low": 1e-4, "high": 0.1, "log": True}},
    "model_versions": True,
}


def test_a_sweep_whose_trials_would_not_start_is_refused_before_any_runs() -> None:
    """args of 262,000 characters fit the spec alone; the trials' flags push them over
    its bound (and a trial would fail when it starts): refused now, naming args."""
    near = ["a" * 100_000, "b" * 100_000, "c" * 62_100]
    s = spec(args=near)
    config = SweepConfig.from_dict(SWEEP)
    with pytest.raises(SpecError):
        trial_spec(s, "t1-t1", 1, {"tfk_learning_rate": 0.01}, 1764000000000)  # what a trial meets
    with pytest.raises(SpecError) as err:
        check_trials_fit(s, config)
    assert err.value.field == "args" and "sweep trial" in str(err.value)
    check_trials_fit(spec(args=near[:2]), config)  # room left: accepted


def test_a_sweep_env_near_its_bound_is_refused_with_the_trial_variables() -> None:
    config = SweepConfig.from_dict(SWEEP)
    s = spec(env={f"E{i}": "v" * 100_000 for i in range(2)} | {"E9": "v" * 62_100})
    with pytest.raises(SpecError) as err:
        check_trials_fit(s, config)
    assert err.value.field == "env"


def test_a_training_files_sweep_is_checked_when_the_file_is_read() -> None:
    from airflow_tfk.dagfactory.training import parse_training

    cluster = {**BASE, "args": ["a" * 100_000, "b" * 100_000, "c" * 62_100]}
    del cluster["name"]
    data = {"dag_id": "sw", "backend": "local", "cluster": cluster, "sweep": SWEEP}
    parse_training(
        {**data, "cluster": {**cluster, "args": cluster["args"][:2]}}, default_dag_id="sw", source="t.yaml"
    )
    with pytest.raises(SpecError) as err:
        parse_training(data, default_dag_id="sw", source="t.yaml")
    fields = [e.field for e in getattr(err.value, "errors", [err.value])]
    assert fields == ["cluster.args"], err.value


@pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_STACK)[0] != 8 * 1024 * 1024,
    reason="the budget assumes an 8 MiB stack",
)
def test_the_budget_is_the_kernels() -> None:
    """Linux itself: an exec just over MAX_EXEC_BYTES fails with 'argument list too long';
    one that fills the spec's budget (and the room left for unseen variables) starts."""

    def run(total: int) -> None:
        n = total // (CHUNK + 16)
        env = {f"V{i:04d}": "x" * (CHUNK + 16 - 6 - 1 - 1 - 8) for i in range(n)}
        subprocess.run(["/bin/true"], env=env, check=True)

    run(MAX_EXEC_BYTES - 8 * 1024)
    with pytest.raises(OSError) as err:
        run(MAX_EXEC_BYTES + 2 * CHUNK)
    assert err.value.errno == 7  # E2BIG
    assert MAX_STRING_CHARS == 131_071 and os.uname().sysname == "Linux"
