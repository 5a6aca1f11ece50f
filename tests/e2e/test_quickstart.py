"""The README's main job, end to end: `airflow dags test tfk_quickstart` on the local
backend trains a real distributed TensorFlow cluster (chief + PS + 2 workers), cleans up
the PS and workers, and the exported SavedModel answers a predict request.
"""

from __future__ import annotations

import json
import re

import psutil
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
STEPS = 100


def test_quickstart_trains_cleans_up_and_serves(airflow_env) -> None:
    run = airflow_env.dags_test(
        "tfk_quickstart", conf=json.dumps({"steps": STEPS, "ps_grace_seconds": 0}), timeout=900
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert "state=success" in out
    # Progress with step/total/%/ETA in the task log.
    assert re.search(rf"\[chief-0\] step \d+/{STEPS} \(\d+\.\d%\), loss [\d.]+, elapsed [\d:]+, ETA", out)
    assert f"step {STEPS}/{STEPS} (100.0%)" in out
    # The PS and workers (parameter_server mode) were deleted after success, logs first.
    assert "----- log of ps-0" in out and "deleted ps, worker of cluster" in out
    # The SavedModel is in TF Serving's layout and answered through serving_default.
    models = airflow_env.local_root / "default" / ".claims" / "tfk-models" / "digits"
    versions = [p for p in models.iterdir() if p.name.isdigit()]
    assert versions and (versions[0] / "saved_model.pb").exists()
    match = re.search(r"answered (\d+) predictions", out)
    assert match and int(match.group(1)) > 0
    # No process of the cluster survives.
    leftovers = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any(str(airflow_env.local_root) in a for a in (p.info["cmdline"] or ()))
    ]
    assert leftovers == []
