"""`airflow dags test tfk_train_publish` on the local backend: TensorBoard comes up over
the logs, a real distributed training exports a model, and the publish step gets it
AVAILABLE in the model server and answering the app's sample request. The servers it
leaves running (by design: they serve after the DAG) are stopped at the end.
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_train_publish_tensorboard(airflow_env) -> None:
    from airflow_tfk.serving.local import LocalServing
    from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
    from airflow_tfk.tensorboard.local import LocalTensorBoard

    run = airflow_env.dags_test(
        "tfk_train_publish", conf=json.dumps({"steps": 60, "ps_grace_seconds": 0}), timeout=900
    )
    out = run.stdout + run.stderr
    root = str(airflow_env.local_root)
    try:
        assert run.returncode == 0, out[-6000:]
        assert "state=success" in out
        url = re.search(r"(http://127\.0\.0\.1:\d+/v1/models/digits/labels/stable)", out)
        assert url, out[-4000:]
        with urllib.request.urlopen(url.group(1), timeout=30) as resp:
            status = json.load(resp)
        states = [v["state"] for v in status["model_version_status"]]
        assert "AVAILABLE" in states
        tensorboards = set(re.findall(r"TensorBoard (\S+) \(pid \d+\) at http://127", out))
        assert tensorboards, "TensorBoard did not start"
    finally:
        LocalServing(ServingSpec(model_name="digits", claim="tfk-models"), root).delete(print)
        for name in set(re.findall(r"TensorBoard (\S+) \(pid \d+\) at", out)):
            LocalTensorBoard(TensorBoardSpec(name=name, claim="tfk-logs"), root).stop(print)
