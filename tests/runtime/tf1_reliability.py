"""Runs of the unmodified TF1 example (3 workers + 2 ps) through a real backend, as a
TF1 user writes it: ``python train.py`` with ``legacy_tf1_flags``.

Shared by ``bench/bench_tf1_reliability.py`` (20 consecutive local runs), the CI test (2)
and ``bench/bench_tf1_node.py`` (5 runs on the real node, Kubernetes backend).
Each run creates its own cluster through the backend, waits for the success
policy (every worker exited 0) with the provider's own wait loop, checks every worker's
held-out accuracy and deletes the cluster (the ps serve forever by design).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_tfk.backends.base import Backend
from airflow_tfk.run.policies import Outcome
from airflow_tfk.run.wait import wait_for_cluster
from airflow_tfk.runtime import examples
from airflow_tfk.runtime.progress import last_event
from airflow_tfk.spec.cluster import Mode, TFClusterSpec

# Its path, not the module: importing the example imports TensorFlow (~6 CPU-seconds),
# which every pytest collection of the test modules that import this one would pay.
SCRIPT = str(Path(examples.__file__).with_name("tf1_between_graph.py"))
WORKERS, PS = 3, 2


@dataclass
class RunResult:
    name: str
    outcome: str
    seconds: float
    message: str = ""
    accuracies: list[float] = field(default_factory=list)

    def row(self, bench: str, run: int, threshold: float) -> dict[str, Any]:
        """The benchmarks' JSON line of this run; ``ok``: it succeeded and every worker
        reached the held-out accuracy ``threshold``."""
        ok = self.outcome == "succeeded" and len(self.accuracies) == WORKERS
        return {
            "bench": bench,
            "run": run,
            "ok": ok and min(self.accuracies) >= threshold,
            "outcome": self.outcome,
            "seconds": round(self.seconds, 1),
            "accuracies": [round(a, 3) for a in self.accuracies],
            "message": self.message[:200],
        }


def tf1_command(steps: int, *extra: str) -> list[str]:
    """The unmodified TF1 example run through the launcher by hand, which appends
    ``--ps_hosts --worker_hosts --job_name --task_index`` and gives its sessions their
    device filters (the runtime-level tests, without a backend)."""
    launch = [sys.executable, "-m", "airflow_tfk.runtime.launch", "--tf1-flags", "--"]
    return [*launch, sys.executable, SCRIPT, "--train_steps", str(steps), *extra]


def bare_command(steps: int, *extra: str) -> list[str]:
    """The command a TF1 user has: ``python train.py``, nothing of this project's."""
    return ["python", SCRIPT, "--train_steps", str(steps), *extra]


def spec_for(name: str, steps: int, timeout: float, shim: bool = True, **extra: Any) -> TFClusterSpec:
    """3 workers + 2 ps of the bare command with ``legacy_tf1_flags``: the provider puts
    it behind the launcher. ``shim=False`` is the baseline: the same script behind the
    launcher with ``--no-device-filters`` (flags and TF_CONFIG alike, no shim). ``extra``:
    more spec fields (the real node's image, namespace, env)."""
    command = bare_command(steps, "--progress_every", "100")
    if not shim:
        command = ["python", "-m", "airflow_tfk.runtime.launch", "--no-device-filters", "--", *command]
    return TFClusterSpec.from_dict(
        {
            "name": name,
            "image": "local",
            "mode": "between_graph",
            "command": command,
            "legacy_tf1_flags": True,
            "ps": {"replicas": PS},
            "worker": {"replicas": WORKERS},
            "max_duration_seconds": int(timeout) + 60,
            "retries_per_index": 0,
            "ps_grace_seconds": 0,
            **extra,
        }
    )


def run_once(
    backend: Backend,
    name: str,
    steps: int = 300,
    timeout: float = 180.0,
    shim: bool = True,
    **extra: Any,
) -> RunResult:
    """One training on ``backend`` (local, or Kubernetes on the real node); never raises
    for a failed or hung run (the result says so)."""
    spec = spec_for(name, steps, timeout, shim, **extra)
    ref = backend.create(spec)
    t0 = time.monotonic()
    try:
        verdict = wait_for_cluster(
            backend,
            ref,
            Mode.BETWEEN_GRAPH,
            {"ps": PS, "worker": WORKERS},
            timeout=timeout,
            progress_interval=3600,
            emit=lambda _msg: None,
        )
        seconds = time.monotonic() - t0
        result = RunResult(name, verdict.outcome.value, seconds, verdict.message)
        if verdict.outcome is Outcome.RUNNING:
            result.outcome = "hung"
        for i in range(WORKERS):
            metrics = last_event(backend.logs(ref, "worker", i), "metrics")
            if metrics is not None:
                result.accuracies.append(float(metrics["accuracy"]))
        return result
    finally:
        backend.delete(ref)
