"""A sweep you can look at: every trial's learning curve (the values its pruner saw, step by
step) with the pruned ones marked, and each parameter's importance.

Two forms of one picture, both from the study alone (no plotting library):

- :func:`text_picture`: a character chart and bars, printed in the sweep task's log (the
  Airflow UI shows it with the task) and by ``airflow-tfk sweep trials``;
- :func:`svg_picture`: the same as an SVG file, written beside an SQLite study.

The curves are the study's intermediate values: the running average of each trial's loss
(negated when the objective is maximised, so lower is better on every curve). A pruned
trial's curve ends in ``x``, a completed one's in ``o``. The importance is Optuna's
(fANOVA over the completed trials); with fewer than two completed trials, or one
parameter, there is none to show.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Curve", "curves_of", "importance_of", "svg_picture", "text_picture"]

WIDTH, HEIGHT = 64, 16  # the text chart's plot area, in characters
MARKS = "abcdefghijklmnopqrstuvwyzABCDEFGHIJKLMNOPQRSTUVWYZ0123456789"  # 'x' and 'X' mean pruned


@dataclass(frozen=True)
class Curve:
    """One trial's learning curve: ``points`` are ``(step, value)`` in step order."""

    number: int
    state: str  # COMPLETE, PRUNED, FAIL, RUNNING...
    points: tuple[tuple[int, float], ...]


def curves_of(study: Any) -> list[Curve]:
    """Every trial's curve, from its intermediate values (finite ones only)."""
    out = []
    for t in study.get_trials(deepcopy=False):
        points = tuple(
            (int(step), float(v)) for step, v in sorted(t.intermediate_values.items()) if math.isfinite(v)
        )
        out.append(Curve(t.number, t.state.name, points))
    return out


def importance_of(study: Any) -> dict[str, float]:
    """Each parameter's importance (summing to 1), or ``{}`` when it cannot be told."""
    import optuna

    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    names = {name for t in complete for name in t.params}
    if len(complete) < 2 or len(names) < 2:
        return {}
    try:
        return dict(optuna.importance.get_param_importances(study))
    except (RuntimeError, ValueError, ZeroDivisionError):  # e.g. every value the same
        return {}


def _mark(i: int) -> str:
    return MARKS[i % len(MARKS)]


def text_picture(curves: Sequence[Curve], importance: Mapping[str, float]) -> str:
    """The curves as a character chart (each trial a letter; its last point ``x`` when it
    was pruned, ``o`` when it completed) and the importance as bars."""
    lines = []
    drawn = [c for c in curves if c.points]
    if drawn:
        steps = [s for c in drawn for s, _ in c.points]
        values = [v for c in drawn for _, v in c.points]
        lo_s, hi_s, lo_v, hi_v = min(steps), max(steps), min(values), max(values)
        grid = [[" "] * WIDTH for _ in range(HEIGHT)]

        def at(step: int, value: float) -> tuple[int, int]:
            x = 0 if hi_s == lo_s else round((step - lo_s) / (hi_s - lo_s) * (WIDTH - 1))
            y = 0 if hi_v == lo_v else round((value - lo_v) / (hi_v - lo_v) * (HEIGHT - 1))
            return x, HEIGHT - 1 - y

        for i, c in enumerate(drawn):
            for j, (step, value) in enumerate(c.points):
                x, y = at(step, value)
                last = j == len(c.points) - 1
                mark = (
                    ("x" if c.state == "PRUNED" else "o" if c.state == "COMPLETE" else "?")
                    if last
                    else _mark(i)
                )
                if grid[y][x] == " " or last:
                    grid[y][x] = mark
        lines.append(f"learning curves (value the pruner saw; lower is better): {len(drawn)} trials")
        for row, cells in enumerate(grid):
            label = (
                f"{hi_v:>10.4g} |"
                if row == 0
                else f"{lo_v:>10.4g} |"
                if row == HEIGHT - 1
                else " " * 10 + " |"
            )
            lines.append(label + "".join(cells).rstrip())
        lines.append(" " * 11 + "+" + "-" * WIDTH)
        lines.append(" " * 12 + f"step {lo_s}".ljust(WIDTH - 8) + f"step {hi_s}")
        legend = ", ".join(
            f"{_mark(i)}=trial {c.number}{' (pruned)' if c.state == 'PRUNED' else ''}"
            for i, c in enumerate(drawn)
        )
        lines.append(f"  {legend}; o = completed, x = pruned")
    else:
        lines.append("learning curves: no trial reported a value yet")
    if importance:
        lines.append("parameter importance (fANOVA over the completed trials):")
        width = max(len(name) for name in importance)
        for name, share in sorted(importance.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {name.ljust(width)}  {'#' * max(1, round(share * 40))} {share:.2f}")
    else:
        lines.append("parameter importance: needs two completed trials and two parameters")
    return "\n".join(lines)


def svg_picture(curves: Sequence[Curve], importance: Mapping[str, float], title: str) -> str:
    """The same picture as an SVG document: curves left (pruned ones dashed, ending in a
    cross), importance bars right."""
    w, h, pad = 900, 420, 50
    plot_w, plot_h = 560, h - 2 * pad
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="{pad}" y="24" font-size="15">{html.escape(title)}</text>',
        f'<rect x="{pad}" y="{pad}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    drawn = [c for c in curves if c.points]
    if drawn:
        steps = [s for c in drawn for s, _ in c.points]
        values = [v for c in drawn for _, v in c.points]
        lo_s, hi_s, lo_v, hi_v = min(steps), max(steps), min(values), max(values)

        def xy(step: int, value: float) -> tuple[float, float]:
            fx = 0.5 if hi_s == lo_s else (step - lo_s) / (hi_s - lo_s)
            fy = 0.5 if hi_v == lo_v else (value - lo_v) / (hi_v - lo_v)
            return pad + fx * plot_w, pad + (1 - fy) * plot_h

        for i, c in enumerate(drawn):
            colour = f"hsl({(i * 47) % 360},65%,40%)"
            dash = ' stroke-dasharray="4 3"' if c.state == "PRUNED" else ""
            pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(s, v) for s, v in c.points))
            parts.append(
                f'<polyline points="{pts}" fill="none" stroke="{colour}"{dash}>'
                f"<title>trial {c.number} ({c.state})</title></polyline>"
            )
            x, y = xy(*c.points[-1])
            end = "x" if c.state == "PRUNED" else "o"
            parts.append(f'<text x="{x + 3:.1f}" y="{y + 4:.1f}" fill="{colour}">{end}{c.number}</text>')
        parts.append(
            f'<text x="{pad}" y="{h - 18}">step {lo_s} .. {hi_s}; '
            f"value {lo_v:.4g} .. {hi_v:.4g}; dashed = pruned</text>"
        )
    bx = pad + plot_w + 40
    parts.append(f'<text x="{bx}" y="{pad - 8}">parameter importance</text>')
    for i, (name, share) in enumerate(sorted(importance.items(), key=lambda kv: -kv[1])):
        y = pad + i * 26
        parts.append(f'<rect x="{bx}" y="{y}" width="{max(1.0, share * 200):.1f}" height="18" fill="#4a7"/>')
        parts.append(f'<text x="{bx + 4}" y="{y + 13}">{html.escape(name)} {share:.2f}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def sqlite_path(url: str) -> str | None:
    """The file of an ``sqlite:///`` study URL, else None."""
    prefix = "sqlite:///"
    return url[len(prefix) :] if url.startswith(prefix) and len(url) > len(prefix) else None


def draw(study: Any, storage: str, title: str) -> tuple[str, str | None]:
    """The study's text picture, and the SVG file written beside an SQLite study
    (``<study file>.<study name>.svg``; None for a database server, or when the directory
    cannot be written: the picture in the log stands alone)."""
    import os
    import re

    curves, importance = curves_of(study), importance_of(study)
    text = text_picture(curves, importance)
    path = sqlite_path(storage)
    if path is None:
        return text, None
    svg = f"{path}.{re.sub(r'[^A-Za-z0-9_.-]', '_', study.study_name)[:100]}.svg"
    try:
        tmp = f"{svg}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(svg_picture(curves, importance, title))
        os.replace(tmp, svg)
    except OSError:
        return text, None
    return text, svg
