"""deploy/grafana: the dashboard JSON is what its generator writes, and every query names
metrics the project exports (the training runtime's and the model server's)."""

from __future__ import annotations

import json
import re

from airflow_tfk.runtime.metrics import TrainingMetrics
from airflow_tfk.runtime.model_server import metrics as serving_metrics
from tests import file_module
from tests.helpers import ROOT

DIR = ROOT / "deploy" / "grafana"
generator = file_module.load("tfk_dashboard", DIR / "dashboard.py")

_METRIC = re.compile(r"(tfk_training_\w+|:tensorflow:serving:\w+)")


def _exported() -> set[str]:
    training = TrainingMetrics({"role": "worker"}, 10, 1)
    training.update(1, 0.5)
    names = {line.split()[2] for line in training.text().splitlines() if line.startswith("# TYPE")}
    latency = serving_metrics.LATENCY
    return names | {serving_metrics.COUNT, f"{latency}_bucket", f"{latency}_sum", f"{latency}_count"}


def test_the_json_is_the_generators_output() -> None:
    committed = json.loads((DIR / "tfk-dashboard.json").read_text(encoding="utf-8"))
    assert committed == generator.dashboard(), "run: .venv/bin/python deploy/grafana/dashboard.py"


def test_every_query_names_an_exported_metric() -> None:
    board = generator.dashboard()
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries += [v["query"]["query"] for v in board["templating"]["list"] if isinstance(v["query"], dict)]
    used = {name for q in queries for name in _METRIC.findall(q)}
    assert used, queries
    assert used <= _exported(), used - _exported()
    # each family the training exports has a panel
    assert {n for n in _exported() if n.startswith("tfk_training_")} - used <= {
        "tfk_training_start_time_seconds"
    }


def test_the_layout_is_one_grafana_can_place() -> None:
    board = generator.dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) and board["schemaVersion"] >= 36 and board["uid"]
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs))
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and refs
