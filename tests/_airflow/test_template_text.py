"""airflow_tfk/_airflow/template_text.py: a value with no text spelling printed inside a text is
refused; a template of one ``{{ expression }}`` keeps its value; the environment a template
compiles in (Airflow's own, native or not, with the DAG's settings) is left as it was."""

from __future__ import annotations

import datetime
from typing import Any

import jinja2
import pytest
from airflow.sdk.definitions._internal.templater import create_template_env
from airflow.sdk.definitions.context import render_template
from airflow.sdk.definitions.param import ParamsDict

from airflow_tfk._airflow.template_text import has_text_spelling, render
from airflow_tfk.core.errors import TemplateValueError

NO_TEXT = [None, True, False, [1, 2], (1,), {"a": 1}, {1}, frozenset({1}), b"x", ParamsDict({"a": 1})]
TEXT = ["a", "", 0, 0.1, -3, datetime.date(2026, 1, 2), jinja2.Undefined()]


def _render(text: str, value: Any, *, native: bool, **env_args: Any) -> Any:
    env = create_template_env(native=native, **env_args)
    return render(env, text, lambda t: render_template(t, {"params": {"x": value}}, native=native))


@pytest.mark.parametrize("value", NO_TEXT, ids=repr)
def test_values_without_a_text_spelling(value: Any) -> None:
    assert not has_text_spelling(value)


@pytest.mark.parametrize("value", TEXT, ids=repr)
def test_values_with_a_text_spelling(value: Any) -> None:
    assert has_text_spelling(value)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("value", NO_TEXT, ids=repr)
@pytest.mark.parametrize(
    "text",
    [
        "--x={{ params.x }}",
        "{{ params.x }}/suffix",
        "{{ params.x }}{{ params.x }}",
        "{% for i in [1] %}{{ params.x }}{% endfor %}",
        "{% if true %}a{{ params.x }}{% endif %}",
        "{% macro m(v) %}{{ v }}{% endmacro %}--x={{ m(params.x) }}",
        "{% set s %}{{ params.x }}{% endset %}{{ s }}",
    ],
)
def test_a_value_without_text_spelling_inside_a_text_is_refused(text: str, value: Any, native: bool) -> None:
    with pytest.raises(TemplateValueError, match="printed inside a text") as err:
        _render(text, value, native=native)
    assert err.value.template == text
    assert "'| tojson' for JSON" in str(err.value)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("value", NO_TEXT, ids=repr)
def test_a_template_of_one_expression_keeps_the_value(value: Any, native: bool) -> None:
    assert _render("{{ params.x }}", value, native=native) == value
    assert _render("{% if true %}{{ params.x }}{% endif %}", value, native=native) == value


@pytest.mark.parametrize(
    ("text", "value", "native", "out"),
    [
        ("--lr={{ params.x }}", 0.1, False, "--lr=0.1"),
        ("--lr={{ params.x }}", 0.1, True, "--lr=0.1"),
        ("{{ params.x }}", 0.1, False, "0.1"),
        ("{{ params.x }}", 0.1, True, 0.1),
        ("--steps={{ params.x }}", 0, True, "--steps=0"),
        ("{{ params.x }}", "None", False, "None"),
        ("--f={{ params.x | tojson }}", [1, 2], False, "--f=[1, 2]"),
        ("--f={{ params.x | tojson }}", None, True, "--f=null"),
        ("--f={{ params.x | string }}", True, False, "--f=True"),
        ("--f={{ params.x | join(',') }}", ["a", "b"], True, "--f=a,b"),
        ("--f={{ params.x[0] }}", ["a"], True, "--f=a"),
        ("{% for i in params.x %}{{ i }},{% endfor %}", [1, 2], False, "1,2,"),
        ("{{ params.x }}", "[1, 2]", True, [1, 2]),  # native: Airflow's literal_eval, unchanged
        ("no template at all", None, False, "no template at all"),
    ],
)
def test_what_keeps_rendering(text: str, value: Any, native: bool, out: Any) -> None:
    assert _render(text, value, native=native) == out


def test_the_environment_keeps_its_settings() -> None:
    """The DAG's macros, filters and delimiters work, and the environment gains nothing
    (no filter, no global): the marks are calls of imported names."""
    env_args: dict[str, Any] = {
        "user_defined_macros": {"twice": lambda v: 2 * v},
        "user_defined_filters": {"shout": lambda v: str(v).upper()},
        "jinja_environment_kwargs": {"variable_start_string": "[[", "variable_end_string": "]]"},
    }
    assert _render("[[ twice(params.x) ]]-[[ 'a' | shout ]]", 2, native=False, **env_args) == "4-A"
    env = create_template_env(native=True, **env_args)
    filters, globals_ = dict(env.filters), dict(env.globals)
    with pytest.raises(TemplateValueError):
        render(env, "a[[ params.x ]]", lambda t: render_template(t, {"params": {"x": None}}, native=True))
    assert env.filters == filters and env.globals == globals_


def test_the_dags_undefined_still_decides() -> None:
    with pytest.raises(jinja2.UndefinedError):
        _render("--x={{ params.missing }}", 1, native=True)
    lenient = _render("--x={{ params.missing }}", 1, native=False, template_undefined=jinja2.Undefined)
    assert lenient == "--x="


def test_a_template_file_included_joins_a_text(tmp_path) -> None:
    """An include adds another template's output: the includer's own values are parts of
    a text, and the search path the DAG set still finds the file."""
    (tmp_path / "part.txt").write_text("included")
    args: dict[str, Any] = {"searchpath": [str(tmp_path)]}
    assert _render("{% include 'part.txt' %}-{{ params.x }}", 1, native=False, **args) == "included-1"
    with pytest.raises(TemplateValueError):
        _render("{{ params.x }}{% include 'part.txt' %}", None, native=False, **args)


@pytest.mark.parametrize("native", [False, True])
def test_the_environments_finalize_spells_values_before_the_check(native: bool) -> None:
    """A DAG whose ``finalize`` writes a null as "" asked for that spelling: ``--lr=``,
    applied once; a value it leaves alone is still checked."""
    calls: list[Any] = []

    @jinja2.pass_context
    def blank_none(context: Any, value: Any) -> Any:
        calls.append(value)
        return "" if value is None else value

    args: dict[str, Any] = {"jinja_environment_kwargs": {"finalize": blank_none}}
    assert _render("--lr={{ params.x }}", None, native=native, **args) == "--lr="
    assert calls == [None]
    assert _render("{{ params.x }}", None, native=native, **args) == ""
    assert _render("--lr={{ params.x }}", 0.1, native=native, **args) == "--lr=0.1"
    with pytest.raises(TemplateValueError, match="a bool value"):
        _render("--flag={{ params.x }}", True, native=native, **args)
    env = create_template_env(native=native, **args)
    render(env, "a{{ params.x }}", lambda t: render_template(t, {"params": {"x": None}}, native=native))
    assert env.finalize is blank_none


@pytest.mark.parametrize("native", [False, True])
def test_a_template_loaded_by_the_search_path_is_part_of_a_text(tmp_path, native: bool) -> None:
    """What ``include``, ``import`` and ``extends`` load prints inside the includer's text:
    its values are checked too, each time it is loaded."""
    (tmp_path / "flag.txt").write_text("{{ params.x }}")
    (tmp_path / "macros.txt").write_text("{% macro lr(v) %}--lr={{ v }}{% endmacro %}")
    args: dict[str, Any] = {"searchpath": [str(tmp_path)]}
    assert _render("--lr={% include 'flag.txt' %}", 0.1, native=native, **args) == "--lr=0.1"
    for text in ("--lr={% include 'flag.txt' %}", "{% import 'macros.txt' as m %}{{ m.lr(params.x) }}"):
        with pytest.raises(TemplateValueError, match="a null value"):
            _render(text, None, native=native, **args)


def test_the_refusal_stays_short_whatever_the_value() -> None:
    with pytest.raises(TemplateValueError) as err:
        _render("--x={{ params.x }}", list(range(100_000)), native=True)
    assert len(str(err.value)) < 600
