"""The unmodified TF1 script completes, run after run, with 3 workers + 2 ps on the local
backend (the CI share of ``bench/bench_tf1_reliability.py``'s 20 runs)."""

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from tests.runtime.tf1_reliability import WORKERS, run_once

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_two_consecutive_runs_complete(tmp_path):
    # here, not at the top: the example imports TensorFlow, and every collection would pay it
    from airflow_tfk.runtime.examples.tf1_between_graph import ACCURACY_THRESHOLD

    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path))
    for run in range(2):
        result = run_once(backend, f"tf1-rel-{run}", steps=300, timeout=240)
        assert result.outcome == "succeeded", result
        assert len(result.accuracies) == WORKERS, result
        assert min(result.accuracies) >= ACCURACY_THRESHOLD, result
        assert not backend.exists(ClusterRef(f"tf1-rel-{run}", "default"))  # deleted, ps too
