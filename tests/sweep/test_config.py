"""The sweep's pure stages: settings, trial specs, storage, the table of trials."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.config import Direction, ParamKind, PrunerKind, SweepConfig
from airflow_tfk.sweep.storage import StoragePolicy
from airflow_tfk.sweep.trials import ENV_PARAMS, base_name, trial_flags, trial_name, trial_spec
from tests.helpers import ROOT

GOOD = {
    "n_trials": 12,
    "max_concurrent_trials": 3,
    "search_space": {
        "tfk_learning_rate": {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
        "hidden": {"type": "int", "low": 16, "high": 128, "step": 16},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    },
    "objective": "accuracy",
    "direction": "maximize",
    "pruner": {"name": "median", "n_startup_trials": 4, "n_warmup_steps": 100},
    "sampler": {"name": "tpe", "seed": 1},
}


def test_a_good_config_round_trips() -> None:
    config = SweepConfig.from_dict(GOOD)
    assert config.direction is Direction.MAXIMIZE
    assert config.pruner.name is PrunerKind.MEDIAN and config.pruner.n_warmup_steps == 100
    assert config.search_space["hidden"].kind is ParamKind.INT
    assert SweepConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"n_trials": 0}, "sweep.n_trials"),
        ({"n_trials": True}, "sweep.n_trials"),
        ({"max_concurrent_trials": 0}, "sweep.max_concurrent_trials"),
        ({"direction": "up"}, "sweep.direction"),
        ({"pruner": {"name": "hyperband"}}, "sweep.pruner.name"),
        ({"pruner": {"n_startup_trials": -1}}, "sweep.pruner.n_startup_trials"),
        ({"sampler": {"seed": "x"}}, "sweep.sampler.seed"),
        ({"search_space": {}}, "sweep.search_space"),
        ({"search_space": {"lr": {"low": 0.0, "high": 1.0, "log": True}}}, "sweep.search_space.lr.low"),
        ({"search_space": {"lr": {"low": 1.0, "high": 0.5}}}, "sweep.search_space.lr.high"),
        ({"search_space": {"lr": {"low": 0.1}}}, "sweep.search_space.lr.high"),
        ({"search_space": {"n": {"type": "int", "low": 1.5, "high": 3}}}, "sweep.search_space.n.low"),
        ({"search_space": {"c": {"type": "categorical", "choices": []}}}, "sweep.search_space.c.choices"),
        ({"search_space": {"c": {"type": "set"}}}, "sweep.search_space.c.type"),
        ({"search_space": {"--lr": {"low": 0, "high": 1}}}, "sweep.search_space.--lr"),
        (
            {"search_space": {"tfk_model_version": {"low": 0, "high": 1}}},
            "sweep.search_space.tfk_model_version",
        ),
        (
            {"search_space": {"c": {"type": "categorical", "choices": ["a", None]}}},
            "sweep.search_space.c.choices[1]",
        ),
        (
            {"search_space": {"c": {"type": "categorical", "choices": [[1, 2]]}}},
            "sweep.search_space.c.choices[0]",
        ),
        (
            {"search_space": {"c": {"type": "categorical", "choices": [{"a": 1}]}}},
            "sweep.search_space.c.choices[0]",
        ),
        ({"storage": ""}, "sweep.storage"),
        ({"trials": 3}, "sweep.trials"),
    ],
)
def test_bad_settings_name_their_field(change: dict, field: str) -> None:
    with pytest.raises(SpecError) as info:
        SweepConfig.from_dict({**GOOD, **change})
    assert info.value.field == field


@pytest.mark.parametrize(
    "flag",
    ["tfk_export_dir", "tfk_model_name", "tfk_progress_every", "tfk_metrics_port", "TFK_x", "tfk-data-dir"],
)
def test_a_search_space_cannot_take_over_where_a_trial_writes_or_reports(flag: str) -> None:
    """Another trial's model, or the progress the pruner reads, is not a hyperparameter."""
    with pytest.raises(SpecError) as info:
        SweepConfig.from_dict({**GOOD, "search_space": {flag: {"type": "categorical", "choices": ["a"]}}})
    assert info.value.field == f"sweep.search_space.{flag}"


@pytest.mark.parametrize("flag", ["tfk_learning_rate", "tfk_batch_size", "tfk_seed"])
def test_the_platforms_hyperparameter_flags_can_be_tuned(flag: str) -> None:
    config = SweepConfig.from_dict({**GOOD, "search_space": {flag: {"type": "int", "low": 1, "high": 4}}})
    assert flag in config.search_space


def test_the_operator_rejects_bad_settings_when_the_dag_is_parsed() -> None:
    from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator

    with pytest.raises(SpecError, match="sweep.max_concurrent_trials"):
        TFHyperparameterSweepOperator(
            task_id="s", cluster_spec={}, sweep={**GOOD, "max_concurrent_trials": -2}
        )


def test_a_trial_spec_appends_its_flags_to_every_args_and_names_the_trial() -> None:
    spec = TFClusterSpec.from_dict(
        {
            "name": "base",
            "image": "img:1",
            "command": ["python", "-m", "app"],
            "args": ["--tfk_steps", "100", "--tfk_learning_rate", "0.5"],
            "mode": "parameter_server",
            "chief": {"replicas": 1, "args": ["--chief_only"]},
            "ps": {"replicas": 1},
            "worker": {"replicas": 2},
        }
    )
    params = {"tfk_learning_rate": 0.01, "hidden": 64, "optimizer": "adam"}
    t = trial_spec(spec, trial_name("base", 3), 3, params, model_version=1003)
    flags = ("--tfk_learning_rate=0.01", "--hidden=64", "--optimizer=adam", "--tfk_model_version=1003")
    assert t.name == "base-t3"
    assert t.args == (*spec.args, *flags)  # after the spec's own: the trial's value wins
    assert t.chief is not None and t.chief.args == ("--chief_only", *flags)
    assert t.worker.args is None  # the cluster's args, flags included
    assert json.loads(t.env[ENV_PARAMS]) == params
    assert trial_flags({"use_bn": True}, None) == ("--use_bn=true",)


def test_the_base_name_leaves_room_for_the_trial_suffix() -> None:
    identity = RunIdentity("a" * 200, "sweep_everything_" * 5, "manual__" + "x" * 100, 4)
    name = trial_name(base_name(identity), 9999)
    assert len(name) <= 30
    assert base_name(identity) == base_name(identity)


def test_storage_is_under_the_sweep_root_and_required_on_kubernetes(tmp_path) -> None:
    sweeps = tmp_path.resolve() / ".sweeps"
    assert studies.storage_url(None, "local", str(tmp_path), "d.t.r.-1") == f"sqlite:///{sweeps}/d.t.r.-1.db"
    assert (
        studies.storage_url("studies/s.db", "local", str(tmp_path), "x") == f"sqlite:///{sweeps}/studies/s.db"
    )
    allowed = StoragePolicy(None, ("postgresql://db/",))
    assert (
        studies.storage_url("postgresql://db/optuna", "kubernetes", None, "x", allowed)
        == "postgresql://db/optuna"
    )
    shared = StoragePolicy(str(tmp_path / "shared"))
    assert studies.storage_url(str(tmp_path / "shared/k.db"), "kubernetes", None, "x", shared).endswith(
        "/shared/k.db"
    )
    assert studies.storage_url(None, "kubernetes", None, "x", shared).endswith("/shared/x.db")
    with pytest.raises(SpecError, match="sweep.storage: is required on the kubernetes backend"):
        studies.storage_url(None, "kubernetes", None, "x")
    with pytest.raises(SpecError, match="sweep.storage: is a file, but the platform sets no sweep root"):
        studies.storage_url("rel.db", "kubernetes", None, "x")


def test_the_table_and_the_best_row() -> None:
    def row(number: int, lr: float, value: float | None, state: str, steps: int, note: str | None) -> dict:
        return {"number": number, "params": {"lr": lr}, "value": value, "state": state, "steps": steps,
                "seconds": 1.0, "note": note}  # fmt: skip

    rows = [
        row(0, 0.1, 0.9, "COMPLETE", 50, None),
        row(1, 0.9, None, "PRUNED", 10, "pruned at step 10"),
        row(2, 0.2, 0.95, "COMPLETE", 50, None),
    ]
    assert studies.best_row(rows, Direction.MAXIMIZE)["number"] == 2
    assert studies.best_row(rows, Direction.MINIMIZE)["number"] == 0
    text = studies.format_table(rows, "accuracy")
    assert text.splitlines()[0].split() == [
        "trial",
        "state",
        "accuracy",
        "steps",
        "seconds",
        "params",
        "note",
    ]
    assert "PRUNED" in text and "pruned at step 10" in text and "lr=0.95" not in text


def test_a_dag_with_a_sweep_imports_no_optuna() -> None:
    """Parse time: building a sweep task imports neither Optuna nor the sweep loop."""
    code = (
        "import sys\n"
        "from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator\n"
        f"TFHyperparameterSweepOperator(task_id='s', backend='local', cluster_spec={{}}, sweep={GOOD!r})\n"
        "bad = [m for m in ('optuna', 'airflow_tfk.sweep.runner', 'airflow_tfk.sweep.study', 'tensorflow')"
        " if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, float("nan")])
def test_a_trial_flag_without_a_command_line_spelling_is_refused(value: object) -> None:
    """Never Python's ``None`` or ``[1]`` on a trial's command line, whatever reaches it."""
    with pytest.raises(SpecError) as info:
        trial_flags({"opt": value}, None)
    assert info.value.field == "sweep.search_space.opt"


@pytest.mark.parametrize(
    ("choices", "equal"),
    [([1, 1.0, True], 1), (["a", "b", "a"], 2), ([0, False], 1), ([2, 2.0], 1), ([1.5, 1, True], 2)],
)
def test_categorical_choices_optuna_cannot_tell_apart_are_refused(choices: list, equal: int) -> None:
    """Optuna records a categorical value by the index of the first choice equal to it
    (1 == 1.0 == True): a trial of 1.0 is stored as 1, so the space is smaller than it
    looks and a sweep would train the one point again and again. Refused, naming it."""
    import optuna

    dist = optuna.distributions.CategoricalDistribution(choices)
    assert dist.to_internal_repr(choices[equal]) != equal  # what the refusal prevents
    with pytest.raises(SpecError, match=rf"sweep\.search_space\.c\.choices\[{equal}\]"):
        SweepConfig.from_dict(
            {"n_trials": 2, "search_space": {"c": {"type": "categorical", "choices": choices}}}
        )


def test_categorical_choices_of_different_values_are_kept() -> None:
    choices = [2, "1", 2.5, True, False, 0.5, "true", "1.0"]
    config = SweepConfig.from_dict(
        {"n_trials": 2, "search_space": {"c": {"type": "categorical", "choices": choices}}}
    )
    assert config.search_space["c"].choices == tuple(choices)


def _first_equal(choices: list) -> int | None:
    """The quadratic rule, as the reference: the first later choice equal to an earlier one."""
    for i, c in enumerate(choices):
        if next(j for j, d in enumerate(choices) if d == c) != i:
            return i
    return None


EQUAL_MIXES = [
    [1, 1.0],
    [True, 1],
    [1.0, True],
    [0, False],
    [0.0, -0.0],
    [False, 0.0],
    ["1", 1, 1.0],
    ["a", "b", "a"],
    [2, 3, 2.0],
    [10**15, float(10**15)],
    ["True", True, 1],
    [0.5, "0.5", 0.5],
    ["x", 1, True],
]


@pytest.mark.parametrize("choices", EQUAL_MIXES, ids=[repr(c) for c in EQUAL_MIXES])
def test_the_duplicate_rule_keeps_its_meaning(choices: list) -> None:
    """Equal is Python's equal (1 == 1.0 == True, 0.0 == -0.0, '1' != 1), as Optuna's
    index of the first equal choice: the one-pass check names what the scan named."""
    space = {"c": {"type": "categorical", "choices": choices}}
    want = _first_equal(choices)
    if want is None:
        SweepConfig.from_dict({**GOOD, "search_space": space})
        return
    with pytest.raises(SpecError) as err:
        SweepConfig.from_dict({**GOOD, "search_space": space})
    assert err.value.field == f"sweep.search_space.c.choices[{want}]"


def test_many_choices_are_checked_in_linear_time() -> None:
    """100,000 choices took over 20 s with a scan per choice."""
    import time

    for last in ("fresh", 0):  # distinct, then one equal to the first at the very end
        choices = [*range(100_000), last]
        start = time.process_time()
        try:
            SweepConfig.from_dict(
                {**GOOD, "search_space": {"c": {"type": "categorical", "choices": choices}}}
            )
        except SpecError as exc:
            assert last == 0 and exc.field == "sweep.search_space.c.choices[100000]"
        assert time.process_time() - start < 10


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "2", True, 1e10])
def test_a_sweep_budget_is_a_finite_positive_number_of_core_hours(bad) -> None:
    base = {"n_trials": 2, "search_space": {"lr": {"type": "float", "low": 0.0, "high": 1.0}}}
    assert SweepConfig.from_dict({**base, "budget_core_hours": 2.5}).budget_core_hours == 2.5
    assert SweepConfig.from_dict(base).budget_core_hours is None
    assert SweepConfig.from_dict({**base, "budget_core_hours": 2.5}).to_dict()["budget_core_hours"] == 2.5
    with pytest.raises(SpecError) as info:
        SweepConfig.from_dict({**base, "budget_core_hours": bad})
    assert info.value.field == "sweep.budget_core_hours"
