"""The sweep's picture (airflow_tfk/sweep/picture.py) from a real Optuna study: every
trial's curve, the pruned ones marked, the importance; as text and as SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import optuna
import pytest

from airflow_tfk.sweep.picture import curves_of, draw, importance_of, svg_picture, text_picture


def _study(storage: str | None = None) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="s1", storage=storage)
    space = {
        "lr": optuna.distributions.FloatDistribution(0.01, 1.0),
        "width": optuna.distributions.IntDistribution(8, 32),
    }
    for lr, width, prune_at in [(0.3, 8, None), (0.9, 16, 3), (0.7, 8, None), (0.05, 32, 2), (1.0, 16, None)]:
        steps = range(1, (prune_at or 5) + 1)
        pruned = prune_at is not None
        study.add_trial(
            optuna.trial.create_trial(
                params={"lr": lr, "width": width},
                distributions=space,
                intermediate_values={s: (lr - 0.3) ** 2 + 1.0 / s for s in steps},
                state=optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.COMPLETE,
                value=None if pruned else (lr - 0.3) ** 2 + 0.2,
            )
        )
    return study


def test_every_trial_with_values_is_a_curve_and_the_pruned_end_in_x() -> None:
    study = _study()
    curves = [c for c in curves_of(study) if c.points]
    assert {c.state for c in curves} == {"COMPLETE", "PRUNED"}
    assert [len(c.points) for c in curves if c.state == "PRUNED"] == [3, 2]
    text = text_picture(curves, importance_of(study))
    chart = [line[12:] for line in text.splitlines() if len(line) > 11 and line[11] == "|"]
    assert sum(line.count("x") for line in chart) == 2  # one end per pruned trial
    assert sum(line.count("o") for line in chart) == 3
    assert "trial 1 (pruned)" in text and "trial 3 (pruned)" in text


def test_the_importance_sums_to_one_and_is_shown_per_parameter() -> None:
    study = _study()
    importance = importance_of(study)
    assert set(importance) == {"lr", "width"}
    assert sum(importance.values()) == pytest.approx(1.0)
    text = text_picture(curves_of(study), importance)
    assert "parameter importance" in text and " lr " in text.replace("lr  ", " lr ")


def test_too_few_completed_trials_say_so_instead_of_a_bar() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    study.tell(study.ask({"lr": optuna.distributions.FloatDistribution(0.1, 1)}), 1.0)
    assert importance_of(study) == {}
    assert "needs two completed trials" in text_picture(curves_of(study), {})


def test_the_svg_is_well_formed_with_a_dashed_line_per_pruned_trial(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    study = _study(f"sqlite:///{db}")
    text, svg = draw(study, f"sqlite:///{db}", "sweep <s1>")
    assert svg is not None and Path(svg).is_file() and Path(svg).parent == tmp_path
    root = ET.parse(svg).getroot()
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 5
    assert sum(1 for line in lines if line.get("stroke-dasharray")) == 2
    assert "sweep &lt;s1&gt;" in Path(svg).read_text()  # the title is text, never markup
    assert svg_picture([], {}, "empty").startswith("<svg")
    assert draw(study, "postgresql://db/x", "t")[1] is None  # no file beside a server
