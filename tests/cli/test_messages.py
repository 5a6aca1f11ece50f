"""What the command line says about a file that is wrong: a misspelt key names the key
meant, a cron typo the presets, and ``render`` given a training file points at ``validate``."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_tfk.cli.main import main
from airflow_tfk.core.errors import SpecError, unknown_key

TRAINING = """\
schedule: "{schedule}"
cluster:
  image: example.com/train:1
  command: [python, train.py]
  mode: all_reduce
  worker: {{replcas: 2}}
"""


def test_unknown_key_names_the_closest_allowed_one() -> None:
    assert unknown_key("replcas", ["args", "replicas"]) == (
        "unknown key (did you mean 'replicas'? allowed: args, replicas)"
    )
    assert unknown_key("zzz", ["args", "replicas"]) == "unknown key (allowed: args, replicas)"


def test_a_spec_with_a_misspelt_key_says_which_key_was_meant() -> None:
    from airflow_tfk.spec.cluster import TFClusterSpec

    data = {"name": "t", "image": "x:1", "command": ["python"], "mode": "all_reduce"}
    data["worker"] = {"replcas": 2}
    with pytest.raises(SpecError) as err:
        TFClusterSpec.from_dict(data)
    assert "worker.replcas: unknown key (did you mean 'replicas'? allowed: " in str(err.value)


def test_validate_says_did_you_mean_and_lists_the_presets(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.yaml").write_text(TRAINING.format(schedule="0 25 * * *"), encoding="utf-8")
    (tmp_path / "b.yaml").write_text(TRAINING.format(schedule="@dayly"), encoding="utf-8")
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "cluster.worker.replcas: unknown key (did you mean 'replicas'? allowed: " in err
    assert "schedule: unknown preset (did you mean '@daily'? allowed: @once, @continuous, @hourly" in err


def test_a_cron_typo_lists_the_presets(tmp_path: Path, capsys) -> None:
    text = TRAINING.format(schedule="0 25 * * *").replace("replcas", "replicas")
    (tmp_path / "a.yaml").write_text(text, encoding="utf-8")
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "schedule: is not a valid cron expression: [0 25 * * *] is not acceptable" in err
    assert "or a preset: @once, @continuous, @hourly, @daily" in err


def test_render_given_a_training_file_points_at_validate(tmp_path: Path, capsys) -> None:
    path = tmp_path / "digits.yaml"
    path.write_text(TRAINING.format(schedule="@daily"), encoding="utf-8")
    assert main(["render", str(path)]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.splitlines()
    assert line == (
        f"error: {path} is a training file (cluster:, schedule:), not a cluster spec: check it with "
        f"`airflow-tfk validate {path}`; `render` takes a cluster spec, such as its cluster: block"
    )


def test_a_sweep_block_says_unknown_key_in_the_same_words(tmp_path: Path, capsys) -> None:
    text = TRAINING.format(schedule="@daily").replace("replcas", "replicas")
    text += "sweep:\n  n_trails: 4\n  search_space: {lr: {type: float, low: 0.001, high: 0.1}}\n"
    (tmp_path / "a.yaml").write_text(text, encoding="utf-8")
    assert main(["validate", str(tmp_path)]) == 1
    assert "sweep.n_trails: unknown key (did you mean 'n_trials'? allowed: " in capsys.readouterr().err
