"""A local sweep with a median pruner vs the same sweep without pruning: best held-out
accuracy and CPU-seconds, side by side.

    .venv/bin/python bench/bench_sweep.py [--trials 12] [--steps 50000] [--concurrency 2]

Both arms run the same ``--trials`` trials of the digits TrainingApp
(airflow_tfk.runtime.examples.digits_app, real TensorFlow, ``all_reduce`` on the local
backend) through the sweep's own loop (airflow_tfk.sweep.runner), at most
``--concurrency`` clusters at once. The search space is the learning rate (log scale)
and the hidden width; the sampler is Optuna's random sampler with the same seed in both
arms, so both run exactly the same parameters in the same order, and the app gets the
same ``--tfk_seed``. The pruned arm uses the median pruner (``--startup`` finished trials
first, no pruning before 5 % of the steps); intermediate values are the smoothed loss of
each trial's progress lines, one every 0.5 % of the steps, so a loser can be cut soon
after the warm-up rather than a whole progress interval later.

CPU-seconds are those of every process of every trial cluster (supervisors and
TensorFlow tasks, user + system), sampled every 0.2 s from /proc. Targets: the pruned
arm's best held-out accuracy within ``--tolerance`` (absolute) of the unpruned arm's, on
at most 60 % of its CPU-seconds.

What pruning can save is the training after the pruning step. Every trial, pruned or
not, pays a fixed start-up: TensorFlow's import in the task (5-6 CPU-s alone), the
strategy, tracing, and for a finished trial the final evaluation; 11 CPU-s per trial
fitted on a loaded development machine. A pruned trial also trains on for the time the
sweep takes to read its progress, ask the pruner and delete it (0.5-1 s on a quiet
machine, tens of seconds on a loaded one, when a pruned trial's log shows it ran 10,000-
20,000 steps past the step it was pruned at); the "training steps run" row counts a
pruned trial only up to that step. The bench prints the fixed cost and the
cost per step that fit both arms. The ratio therefore depends on how long a trial
trains against that fixed cost. The default of 50,000 steps (about 45 CPU-s of training
per trial, four times the start-up) is the honest setting: a sweep worth pruning trains
for minutes or hours per trial, not for about as long as TensorFlow takes to import.
With 6,000 or 20,000 steps the ratio stays above 0.7 on this machine: the five or so
trials that finish in both arms, and every trial's start-up, are most of the cost.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import parser  # noqa: E402

from airflow_tfk.backends.local import LocalBackend  # noqa: E402
from airflow_tfk.naming import RunIdentity  # noqa: E402
from airflow_tfk.spec import TFClusterSpec  # noqa: E402
from airflow_tfk.sweep.config import SweepConfig  # noqa: E402
from airflow_tfk.sweep.runner import SweepRunner  # noqa: E402
from airflow_tfk.sweep.study import format_table, storage_url  # noqa: E402
from airflow_tfk.sweep.trials import base_name  # noqa: E402

TARGET_CPU_RATIO = 0.60


class CpuMeter:
    """CPU-seconds of every process under a local backend root (the supervisors carry
    the root in their argv; their TensorFlow tasks are their children)."""

    def __init__(self, root: Path, every: float = 0.2) -> None:
        self.root = str(root)
        self.every = every
        self.seen: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for p in psutil.process_iter(["cmdline"]):
            try:
                if not any(self.root in part for part in p.info["cmdline"] or ()):
                    continue
                for q in [p, *p.children(recursive=True)]:
                    t = q.cpu_times()
                    self.seen[(q.pid, q.create_time())] = t.user + t.system
            except psutil.Error:
                pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.every)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(self.seen.values())


def spec(steps: int, workers: int) -> TFClusterSpec:
    return TFClusterSpec.from_dict(
        {
            "name": "bench",
            "image": "local/unused:1",
            "mode": "all_reduce",
            "command": ["python", "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": [
                "--tfk_steps",
                str(steps),
                "--tfk_progress_every",
                str(max(1, steps // 200)),
                "--tfk_checkpoint_every",
                "0",
                "--tfk_seed",
                "0",
                "--tfk_batch_size",
                "32",
            ],  # fmt: skip
            "worker": {"replicas": workers},
            "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"},
            "ps_grace_seconds": 0,
            "max_duration_seconds": 3600,
        }
    )


def config(args, pruned: bool) -> SweepConfig:
    return SweepConfig.from_dict(
        {
            "n_trials": args.trials,
            "max_concurrent_trials": args.concurrency,
            "search_space": {
                "tfk_learning_rate": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
                "hidden": {"type": "int", "low": 4, "high": 96, "log": True},
            },
            "objective": "accuracy",
            "direction": "maximize",
            "sampler": {"name": "random", "seed": args.seed},
            "pruner": {"name": "median", "n_startup_trials": args.startup, "n_warmup_steps": args.steps // 20}
            if pruned
            else "none",
            "model_versions": False,
            "poll_interval": 0.5,
            "smoothing": 0.3,
        }
    )


def run_arm(args, name: str, pruned: bool, work: Path) -> dict:
    root = work / name
    backend = LocalBackend(str(root), workdir=str(REPO))
    identity = RunIdentity("bench_sweep", "sweep", name)
    cfg = config(args, pruned)
    study = f"bench-{name}"
    runner = SweepRunner(
        backend,
        spec(args.steps, args.workers),
        identity,
        cfg,
        base=base_name(identity),
        study_name=study,
        storage=storage_url(None, "local", str(root), study),
        emit=lambda line: None,
    )
    meter = CpuMeter(root)
    t0 = time.monotonic()
    try:
        result = runner.run()
    finally:
        cpu = meter.stop()
    wall = time.monotonic() - t0
    print(f"\n[{name}] {wall:.0f} s wall, {cpu:.0f} CPU-s, peak {result.peak_concurrency} clusters")
    print(format_table(result.trials, "accuracy"))
    states = [r["state"] for r in result.trials]
    return {
        "best": result.best["value"] if result.best else float("nan"),
        "best_trial": result.best["number"] if result.best else None,
        "cpu": cpu,
        "wall": wall,
        "pruned": states.count("PRUNED"),
        "failed": states.count("FAIL"),
        "steps": sum(r["steps"] or 0 for r in result.trials),
    }


def main() -> int:
    p = parser(__doc__, trials=12, steps=50000, concurrency=2, workers=1, seed=3, startup=2, tolerance=0.02)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfk-bench-sweep-"))
    try:
        full = run_arm(args, "unpruned", False, work)
        cut = run_arm(args, "pruned", True, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = cut["cpu"] / full["cpu"] if full["cpu"] else float("nan")
    gap = full["best"] - cut["best"]
    print(
        f"\n{args.trials} trials x {args.steps} steps, digits app, all_reduce x{args.workers}, "
        f"<= {args.concurrency} at once, random sampler seed {args.seed}"
    )
    print(f"{'':24}{'unpruned':>12}{'median pruner':>16}")
    print(f"{'best held-out accuracy':24}{full['best']:>12.4f}{cut['best']:>16.4f}")
    print(f"{'best trial':24}{full['best_trial']!s:>12}{cut['best_trial']!s:>16}")
    print(f"{'trials pruned':24}{full['pruned']:>12}{cut['pruned']:>16}")
    print(f"{'trials failed':24}{full['failed']:>12}{cut['failed']:>16}")
    print(f"{'training steps run':24}{full['steps']:>12}{cut['steps']:>16}")
    print(f"{'CPU-seconds':24}{full['cpu']:>12.0f}{cut['cpu']:>16.0f}")
    print(f"{'wall seconds':24}{full['wall']:>12.0f}{cut['wall']:>16.0f}")
    if full["steps"] != cut["steps"]:
        # CPU = trials x fixed + steps x per-step, fitted to the two arms
        per_step = (full["cpu"] - cut["cpu"]) / (full["steps"] - cut["steps"])
        fixed = (full["cpu"] - per_step * full["steps"]) / args.trials
        print(f"fitted cost: {fixed:.1f} CPU-s per trial (start-up) + {1000 * per_step:.2f} CPU-ms per step")
    ok_cpu = ratio <= TARGET_CPU_RATIO
    ok_best = gap <= args.tolerance
    verdict = "ok" if ok_cpu else "MISSED"
    print(f"CPU-seconds pruned/unpruned: {ratio:.2f} (target <= {TARGET_CPU_RATIO}): {verdict}")
    print(
        f"best accuracy, unpruned - pruned: {gap:+.4f} (tolerance {args.tolerance}): "
        f"{'ok' if ok_best else 'MISSED'}"
    )
    return 0 if ok_cpu and ok_best else 1


if __name__ == "__main__":
    sys.exit(main())
