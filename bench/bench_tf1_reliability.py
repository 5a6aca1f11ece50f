"""Reliability of an unmodified TF1 between-graph script: N consecutive runs.

    .venv/bin/python bench/bench_tf1_reliability.py [--runs 20] [--steps 300] [--timeout 180]

Each run is 3 workers + 2 ps of ``airflow_tfk/runtime/examples/tf1_between_graph.py``
(it reads only ``--ps_hosts --worker_hosts --job_name --task_index`` and sets no
``device_filters``), given as the bare ``python tf1_between_graph.py`` with
``legacy_tf1_flags: true``, on the real local backend, in a fresh cluster. A run passes
when every worker exits 0 within ``--timeout`` seconds and reaches the held-out accuracy
threshold. ``--baseline-runs`` first runs the same script with the launcher's
``--no-device-filters`` (no shim), measured in the same run: there a worker can wait for
peers that have already exited. The real node's 5 runs: ``bench/bench_tf1_node.py``.
Prints one JSON line per run and a summary; exit 0 only if every shimmed run passed.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import parser as bench_parser

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, runs=20, steps=300, timeout=180.0)
    p.add_argument("--baseline-runs", type=int, default=0, help="runs without the device-filter shim")
    args = p.parse_args(argv)

    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.runtime.examples.tf1_between_graph import ACCURACY_THRESHOLD
    from tests.runtime.tf1_reliability import run_once

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    summary = {}
    with tempfile.TemporaryDirectory(prefix="tfk-bench-tf1-") as tmp:
        backend = LocalBackend(os.path.join(tmp, "root"), workdir=tmp)
        for label, runs, shim in (("baseline_no_shim", args.baseline_runs, False), ("shim", args.runs, True)):
            if not runs:
                continue
            results = []
            for i in range(runs):
                name = f"tf1-{label.replace('_', '-')}-{i}"
                r = run_once(backend, name, args.steps, args.timeout, shim)
                row = r.row(label, i + 1, ACCURACY_THRESHOLD)
                results.append((row["ok"], r))
                print(json.dumps(row), flush=True)
            times = [r.seconds for ok, r in results if ok]
            summary[label] = {
                "runs": runs,
                "passed": sum(ok for ok, _ in results),
                "median_seconds": round(statistics.median(times), 1) if times else None,
                "max_seconds": round(max(times), 1) if times else None,
            }
    print(json.dumps({"bench": "summary", **summary}), flush=True)
    shim = summary.get("shim")
    return 0 if shim is None or shim["passed"] == shim["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
