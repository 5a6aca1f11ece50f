"""Reliability of an unmodified TF1 between-graph script on the real node: N consecutive runs.

    flock /tmp/tfk-node.lock .venv/bin/python bench/bench_tf1_node.py [--runs 5] [--steps 300]

Each run is 3 workers + 2 ps of ``airflow_tfk/runtime/examples/tf1_between_graph.py`` (it
reads only ``--ps_hosts --worker_hosts --job_name --task_index`` and sets no
``device_filters``), given as the bare ``python tf1_between_graph.py`` with
``legacy_tf1_flags: true``, in real pods on the real node of ``tests/k8s_node`` (started
here, removed at the end), through the Kubernetes backend and the provider's own wait loop,
in a fresh cluster. A run passes when every worker exits 0 within ``--timeout`` seconds and
reaches the held-out accuracy threshold. The same spec runs ``--local-runs`` times on the
local backend in the same session: the baseline of a run's normal time, so each node
run's time is also printed as a ratio to it. Prints one JSON line per run and a summary;
exit 0 only if every node run passed. The local backend's 20 runs:
``bench/bench_tf1_reliability.py``.
"""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from _common import parser as bench_parser

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

#: small TensorFlow thread pools: 5 TF processes share the node's 2 cores
ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}


def _row(label: str, i: int, result: Any, threshold: float, baseline: float | None) -> dict[str, Any]:
    row = result.row(label, i + 1, threshold)
    if baseline:
        row["ratio_to_local"] = round(result.seconds / baseline, 2)
    print(json.dumps(row), flush=True)
    return row


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["seconds"] for r in rows if r["ok"]]
    median = statistics.median(times) if times else None
    return {
        "runs": len(rows),
        "passed": sum(r["ok"] for r in rows),
        "median_seconds": median,
        "max_seconds": max(times) if times else None,
        "max_over_median": round(max(times) / median, 2) if median else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, runs=5, steps=300, timeout=420.0)
    p.add_argument("--local-runs", type=int, default=1, help="baseline runs on the local backend")
    a = p.parse_args(argv)
    logging.disable(logging.INFO)

    from k8s_node import node as nodemod
    from kubernetes import client

    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.runtime.examples.tf1_between_graph import ACCURACY_THRESHOLD
    from tests.runtime.tf1_reliability import run_once

    summary: dict[str, Any] = {}
    baseline = None
    tmp = tempfile.mkdtemp(prefix="tfk-bench-tf1-node-")
    try:
        local = LocalBackend(str(Path(tmp, "root")), workdir=tmp)
        rows = [
            _row(
                "local",
                i,
                run_once(local, f"tf1l-{i}", a.steps, a.timeout, env=ENV),
                ACCURACY_THRESHOLD,
                None,
            )
            for i in range(a.local_runs)
        ]
        summary["local"] = _summary(rows)
        baseline = summary["local"]["median_seconds"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    node = nodemod.Node.start(log=lambda m: print(m, file=sys.stderr))
    try:
        core = client.CoreV1Api(node.api_client())
        ns = f"bench-tf1-{uuid.uuid4().hex[:6]}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        k8s = KubernetesBackend(config_file=str(node.kubeconfig))
        pod = {"image": nodemod.TRAIN_IMAGE, "image_pull_policy": "Never", "namespace": ns, "env": ENV}
        rows = []
        for i in range(a.runs):
            name = f"tf1n-{uuid.uuid4().hex[:6]}"
            result = run_once(k8s, name, a.steps, a.timeout, **pod)
            rows.append(_row("node", i, result, ACCURACY_THRESHOLD, baseline))
        summary["node"] = _summary(rows)
    finally:
        node.stop()
        left = node.leftovers(removed=False)
        node.remove()
        if left:
            print(f"left behind: {left}", file=sys.stderr)
    print(json.dumps({"bench": "summary", **summary}), flush=True)
    return 0 if summary["node"]["passed"] == summary["node"]["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
