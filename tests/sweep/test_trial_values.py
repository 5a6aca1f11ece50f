"""A sweep's values are data: no choice becomes a platform flag, and a trial exports only
under its own sweep's model.

Every value is put through the runtime's real parsers (``parse_flags`` and a
``TrainingApp``'s) on the args of the real trial spec, and on the container args the
renderer writes for it: the platform's flags come out as the spec set them, and the value
reaches its own flag whole.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.runtime import flags as runtime_flags
from airflow_tfk.runtime.app import TrainingApp
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.sweep.config import PLATFORM_FLAG_PREFIX, TUNABLE_PLATFORM_FLAGS, SweepConfig
from airflow_tfk.sweep.trials import trial_flags, trial_spec

#: the platform's flags as the runtime declares them (valued ones, then both switches)
PLATFORM_FLAGS = tuple(runtime_flags.PREFIX + name for name, *_ in runtime_flags._VALUED) + tuple(
    flag for _, (on, _h), (off, _g) in runtime_flags._SWITCHES for flag in (on, off)
)
#: what the spec says the trials export, and the platform's environment of a task
MODEL, EXPORT_BASE, VERSION = "mine", "/tfk/models", 7
ENV = {"TFK_MODEL_DIR": EXPORT_BASE, "TFK_DATA_DIR": "/tfk/data", "TFK_LOG_DIR": "/tfk/logs"}


def hostile_values() -> Iterator[str]:
    """Values that would be options if a parser read them as a word of their own: every
    platform flag with and without a value, every abbreviation of it, split by a space or
    a newline, and the words that end, start or replace options."""
    for flag in PLATFORM_FLAGS:
        yield from (flag, f"{flag}=victim", f"{flag} victim", f"{flag}\nvictim", f"x\n{flag}=victim")
        yield from (f"{flag[:cut]}=victim" for cut in range(len("--t"), len(flag)))
    yield from ("-", "---", "=", "==--tfk_model_name=victim", "=--tfk_export_dir=/x", "-h", "--help", "-x")
    yield from ("--opt=--tfk_model_name=victim", "@argfile", " --tfk_model_name=victim", "-1e-3", "")


HOSTILE = sorted(set(hostile_values()))
#: one value of each kind, for the slower render of the whole trial
RENDERED = [v for v in HOSTILE if v.endswith("=victim") and "\n" not in v and " " not in v][:40] + [
    "-h",
    "victim --tfk_export_dir=/x",
    "$(TFK_MODEL_DIR)",
]


def base_spec(**extra: object) -> TFClusterSpec:
    return TFClusterSpec.from_dict(
        {
            "name": "base",
            "image": "img:1",
            "command": ["python", "-m", "app"],
            "args": ["--tfk_model_name", MODEL, "--tfk_steps", "100"],
            "mode": "all_reduce",
            "worker": {"replicas": 1},
            **extra,
        }
    )


class App(TrainingApp):
    """A training app with one string flag of its own, which the sweep tunes."""

    model_name = "app-default"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--opt", default="unset")


def assert_own_model(
    argv: list[str], env: dict[str, str], value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both parsers a trial's task runs give the spec's model, the platform's export
    base and the trial's version, and the app's flag the whole value."""
    for name, text in env.items():
        monkeypatch.setenv(name, text)  # the app reads the process's environment
    flags, rest = runtime_flags.parse_flags(argv, env=env)
    assert (flags.model_name, flags.export_dir, flags.model_version) == (MODEL, EXPORT_BASE, VERSION), value
    assert rest.count(f"--opt={value}") == 1, rest
    app = App()
    app.parse(argv)
    assert (app.flags.model_name, app.flags.export_dir, app.flags.model_version) == (
        MODEL,
        EXPORT_BASE,
        VERSION,
    )
    assert app.args.opt == value


@pytest.mark.parametrize("value", HOSTILE)
def test_no_value_of_an_app_flag_becomes_a_platform_flag(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    trial = trial_spec(base_spec(), "base-t1", 1, {"opt": value}, VERSION)
    assert_own_model(list(trial.args), {**ENV, **trial.env}, value, monkeypatch)


@pytest.mark.parametrize("value", RENDERED)
def test_the_rendered_trial_command_keeps_the_value_as_data(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The args the kubelet (or the local backend) runs, from the manifests the sweep's
    trial renders to: ``$$`` is the kubelet's escape of ``$``."""
    from airflow_tfk.render.manifests import render

    trial = trial_spec(base_spec(), "base-t1", 1, {"opt": value}, VERSION)
    (job,) = [m for m in render(trial) if m["kind"] == "Job"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    argv = [a.replace("$$", "$") for a in container["args"]]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    assert_own_model(argv, {**env, **ENV}, value, monkeypatch)


@pytest.mark.parametrize("flag", ["tfk_seed", "tfk_learning_rate", "tfk_batch_size"])
@pytest.mark.parametrize("value", ["--tfk_model_name=victim", "1 --tfk_export_dir=/x", "---", "-h"])
def test_a_value_of_a_tunable_platform_flag_is_its_argument_or_refused(flag: str, value: str) -> None:
    """A categorical string for a platform hyperparameter is that flag's argument: the
    runtime refuses it as a number, it never sets another flag."""
    trial = trial_spec(base_spec(), "base-t1", 1, {flag: value}, VERSION)
    with pytest.raises(SystemExit):
        runtime_flags.parse_flags(list(trial.args), env=ENV)


@pytest.mark.parametrize("flag", TUNABLE_PLATFORM_FLAGS)
@pytest.mark.parametrize("choice", ["--tfk_model_name=victim", "0.1", True, None])
def test_a_platform_hyperparameter_s_choices_are_numbers(flag: str, choice: object) -> None:
    """Refused when the sweep is read, naming the choice, not by each trial that draws it."""
    space = {flag: {"type": "categorical", "choices": [1, choice]}}
    with pytest.raises(SpecError) as caught:
        SweepConfig.from_dict({"n_trials": 1, "search_space": space})
    assert caught.value.field == f"sweep.search_space.{flag}.choices[1]"


@pytest.mark.parametrize("flag", ["tfk_batch_size", "tfk_steps", "tfk_seed", "tfk_steps_per_call"])
def test_an_integer_platform_flag_takes_no_float_range(flag: str) -> None:
    with pytest.raises(SpecError, match=rf"sweep.search_space.{flag}.type: --{flag} reads an integer"):
        SweepConfig.from_dict({"n_trials": 1, "search_space": {flag: {"low": 1.0, "high": 8.0}}})
    assert SweepConfig.from_dict(
        {"n_trials": 1, "search_space": {"tfk_learning_rate": {"low": 0.1, "high": 1}}}
    )


def test_a_tunable_platform_flag_reads_its_value() -> None:
    trial = trial_spec(base_spec(), "base-t1", 1, {"tfk_learning_rate": 0.05, "tfk_batch_size": 64}, VERSION)
    flags, _ = runtime_flags.parse_flags(list(trial.args), env=ENV)
    assert (flags.learning_rate, flags.batch_size, flags.model_name, flags.model_version) == (
        0.05,
        64,
        MODEL,
        VERSION,
    )


def test_every_trial_word_is_one_flag_with_its_value() -> None:
    """One word per parameter, the flag name before the first '=' (so no parser can split
    the value off), the platform's version last."""
    words = trial_flags({"opt": "--tfk_model_name=victim", "lr": 0.1, "use_bn": True}, VERSION)
    assert words == (
        "--opt=--tfk_model_name=victim",
        "--lr=0.1",
        "--use_bn=true",
        f"--tfk_model_version={VERSION}",
    )


def test_a_value_argparse_would_drop_is_refused_naming_its_choice() -> None:
    """``--opt=--`` reaches an argparse app as ``[]``: the one text that is not carried."""
    space = {"opt": {"type": "categorical", "choices": ["a", "--"]}}
    with pytest.raises(SpecError) as caught:
        SweepConfig.from_dict({"n_trials": 1, "search_space": space})
    assert caught.value.field == "sweep.search_space.opt.choices[1]"
    with pytest.raises(SpecError, match="sweep.search_space.opt: must not be '--'"):
        trial_flags({"opt": "--"}, None)


def reserved_keys() -> Iterator[str]:
    """Search-space keys that would name or abbreviate a platform flag: every prefix of
    every platform flag's name, in other cases and with '-' for '_'."""
    for flag in PLATFORM_FLAGS:
        name = flag[2:]
        for cut in range(1, len(name) + 1):
            key = name[:cut]
            if key in TUNABLE_PLATFORM_FLAGS or not re.match(r"^[A-Za-z]", key):
                continue
            yield from (key, key.upper(), key.replace("_", "-"), key.capitalize())


@pytest.mark.parametrize("key", sorted(set(reserved_keys())))
def test_a_key_naming_or_abbreviating_a_platform_flag_is_refused(key: str) -> None:
    space = {key: {"type": "categorical", "choices": ["a"]}}
    with pytest.raises(SpecError) as caught:
        SweepConfig.from_dict({"n_trials": 1, "search_space": space})
    assert caught.value.field == f"sweep.search_space.{key}"


@pytest.mark.parametrize("key", ["lr", "opt", "tfkx", "t1", "tx", "model_name", *TUNABLE_PLATFORM_FLAGS])
def test_app_flags_and_the_hyperparameters_are_keys(key: str) -> None:
    space = {key: {"type": "int", "low": 1, "high": 4}}
    assert key in SweepConfig.from_dict({"n_trials": 1, "search_space": space}).search_space


def test_the_sweep_knows_the_runtime_s_prefix() -> None:
    """The provider does not import the runtime: the prefix it reserves is checked here."""
    assert runtime_flags.PREFIX == "--" + PLATFORM_FLAG_PREFIX
    assert all(flag.startswith(runtime_flags.PREFIX) for flag in PLATFORM_FLAGS)


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ({"core_seconds": 12.5}, 12.5),
        ({"core_seconds": 0}, 0.0),
        ({"core_seconds": -1}, None),
        ({"core_seconds": float("nan")}, None),
        ({"core_seconds": "12"}, None),
        ({"core_seconds": True}, None),
        ([12.5], None),
        ("12.5", None),
        (None, None),
    ],
)
def test_a_trials_recorded_usage_is_read_as_data(recorded, expected):
    """The study is a file: a usage attribute that is not a finite number of seconds is
    no figure, never an error in the sweep's result."""
    from airflow_tfk.sweep.result import sweep_usage
    from airflow_tfk.sweep.study import _core_seconds

    assert _core_seconds(recorded) == expected
    row = {"number": 0, "state": "COMPLETE", "core_seconds": _core_seconds(recorded)}
    assert sweep_usage([row])["trials"] == (0 if expected is None else 1)
