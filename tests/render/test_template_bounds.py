"""The CPU budget of one render counts the template's work, not the garbage collector's."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.render import template_bounds
from airflow_tfk.render.template_bounds import TemplateBoundError
from airflow_tfk.render.templating import template_environment

#: a collection runs inside the render (as one an allocation starts would), then more filters
#: look at the clock
TEMPLATE = "{{ 1 | collect | tojson }}{% for i in range(300) %}{{ [i, i] | tojson }}{% endfor %}"


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.fixture
def slow_collections() -> Iterator[list[int]]:
    """The first collection inside a render takes the budget's whole CPU time and more (a
    full collection of a large process is what CI met)."""
    seen: list[int] = []

    def slow(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and not seen and template_bounds._BUDGET.get() is not None:
            seen.append(info["generation"])
            _spin(template_bounds.MAX_CPU_SECONDS + 0.2)

    # run after the module's own "start" entry, so the spin falls inside its measured pause
    gc.callbacks.append(slow)
    try:
        yield seen
    finally:
        gc.callbacks.remove(slow)


def _env(tmp_path: Path, text: str) -> Any:
    (tmp_path / "t.j2").write_text(text)
    return template_environment((tmp_path,))


def test_a_long_collection_inside_a_render_does_not_spend_the_budget(
    slow_collections: list[int], tmp_path: Path
) -> None:
    env = _env(tmp_path, TEMPLATE)
    env.filters["collect"] = template_bounds.bounded_filter("collect", lambda v: gc.collect() * 0 + v)
    out = env.get_template("t.j2").render()
    assert slow_collections, "no collection ran during the render: the test proves nothing"
    assert out.startswith("1[0, 0][1, 1]")


def test_cpu_the_template_spends_itself_is_still_bounded(tmp_path: Path) -> None:
    """The same clock still stops a render: the second filter finds the first one's time spent."""
    env = _env(tmp_path, "{{ 1 | burn | burn | tojson }}")
    env.filters["burn"] = template_bounds.bounded_filter(
        "burn", lambda v: _spin(template_bounds.MAX_CPU_SECONDS + 0.1) or v
    )
    with pytest.raises(TemplateBoundError, match="CPU seconds"):
        env.get_template("t.j2").render()
