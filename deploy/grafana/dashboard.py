"""Writes tfk-dashboard.json, the Grafana dashboard of trainings and their model servers.

    .venv/bin/python deploy/grafana/dashboard.py   # rewrites deploy/grafana/tfk-dashboard.json

Kept as code so each panel's query names metrics the project exports (the runtime's
``tfk_training_*`` and the model server's ``:tensorflow:serving:*``), which
tests/test_grafana_dashboard.py checks, and ``schema_check.py`` checks it against Grafana's
own dashboard schema (tests/test_grafana_schema.py); the JSON is what Grafana imports
(Dashboards > New > Import, with a Prometheus data source).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("tfk-dashboard.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'cluster=~"$cluster"'

# (title, unit, [(legend, PromQL)], width)
TRAINING = [
    (
        "Progress",
        "percentunit",
        [
            (
                "{{cluster}} {{role}}-{{index}}",
                f"tfk_training_steps_total{{{SEL}}} / tfk_training_total_steps{{{SEL}}}",
            )
        ],
        12,
    ),
    (
        "Steps per second",
        "ops",
        [("{{cluster}} {{role}}-{{index}}", f"tfk_training_steps_per_second{{{SEL}}}")],
        12,
    ),
    ("Loss", "none", [("{{cluster}} {{role}}-{{index}}", f"tfk_training_loss{{{SEL}}}")], 12),
    (
        "Examples per second (per replica)",
        "ops",
        [("{{cluster}} {{role}}-{{index}}", f"tfk_training_examples_per_second{{{SEL}}}")],
        12,
    ),
    (
        "ETA",
        "s",
        [
            (
                "{{cluster}} {{role}}-{{index}}",
                f"(tfk_training_total_steps{{{SEL}}} - tfk_training_steps_total{{{SEL}}})"
                f" / clamp_min(rate(tfk_training_steps_total{{{SEL}}}[2m]), 1e-9)",
            )
        ],
        24,
    ),
]
SERVING = [
    (
        "Requests per second",
        "reqps",
        [
            (
                "{{model_name}} {{status}}",
                "sum by (model_name, status) "
                '(rate(:tensorflow:serving:request_count{model_name=~"$model"}[1m]))',
            )
        ],
        12,
    ),
    (
        "Latency p99",
        "µs",
        [
            (
                "{{model_name}} {{API}}",
                "histogram_quantile(0.99, sum by (le, model_name, API) "
                '(rate(:tensorflow:serving:request_latency_bucket{model_name=~"$model"}[5m])))',
            )
        ],
        12,
    ),
]


def _panel(
    pid: int, title: str, unit: str, targets: list[tuple[str, str]], w: int, x: int, y: int
) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": w, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
            for i, (legend, expr) in enumerate(targets)
        ],
    }


def _row(pid: int, title: str, y: int) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "row",
        "title": title,
        "collapsed": False,
        "panels": [],
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for row_title, rows in (("Training", TRAINING), ("Serving", SERVING)):
        panels.append(_row(len(panels) + 1, row_title, y))
        y += 1
        x = 0
        for title, unit, targets, w in rows:
            if x + w > 24:
                x, y = 0, y + 8
            panels.append(_panel(len(panels) + 1, title, unit, targets, w, x, y))
            x += w
        y += 8

    def var(name: str, query: str) -> dict[str, Any]:
        return {
            "name": name,
            "type": "query",
            "datasource": DS,
            "query": {"query": query, "refId": name},
            "includeAll": True,
            "multi": True,
            "current": {"text": "All", "value": "$__all"},
            "refresh": 2,
        }

    return {
        "uid": "airflow-tfk",
        "title": "airflow-tfk: trainings and model servers",
        "tags": ["airflow-tfk", "tensorflow"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "browser",
        "annotations": {"list": []},
        "panels": panels,
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus"},
                var("cluster", "label_values(tfk_training_total_steps, cluster)"),
                var("model", "label_values(:tensorflow:serving:request_count, model_name)"),
            ]
        },
    }


def main() -> None:
    OUT.write_text(json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
