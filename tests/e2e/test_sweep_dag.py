"""`airflow dags test tfk_sweep` on the local backend: a small sweep of real distributed
TensorFlow trainings, then the quality gate and publish of the best trial's version. The
model server it leaves running (by design) is stopped at the end.
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_sweep_then_publish_the_best_trial(airflow_env) -> None:
    from airflow_tfk.serving.local import LocalServing
    from airflow_tfk.serving.spec import ServingSpec

    conf = {"trials": 3, "max_concurrent_trials": 2, "steps": 120, "min_accuracy": 0.3}
    run = airflow_env.dags_test("tfk_sweep", conf=json.dumps(conf), timeout=1500)
    out = run.stdout + run.stderr
    root = str(airflow_env.local_root)
    try:
        assert run.returncode == 0, out[-6000:]
        assert "state=success" in out
        assert "table of trials" in out
        best = re.search(r"best trial (\d+): accuracy ([0-9.]+) with .*; model version (\d+)", out)
        assert best, out[-4000:]
        # The version published is the best trial's, exported under the sweep's version series.
        assert re.search(rf"publishing version {best.group(3)}, exported by sweep", out), out[-4000:]
        url = re.search(r"(http://127\.0\.0\.1:\d+/v1/models/digits_sweep/labels/stable)", out)
        assert url, out[-4000:]
        with urllib.request.urlopen(url.group(1), timeout=30) as resp:
            status = json.load(resp)
        assert "AVAILABLE" in [v["state"] for v in status["model_version_status"]]
        assert not list(airflow_env.local_root.glob("*/tfk-sweep-*/state.json")) or all(
            json.loads(p.read_text()).get("deleted_at")
            for p in airflow_env.local_root.glob("*/tfk-sweep-*/state.json")
        )
    finally:
        LocalServing(ServingSpec(model_name="digits_sweep", claim="tfk-models"), root).delete(print)
