"""How long a sweep's pruning decision waits while a finished trial's curve is written.

    .venv/bin/python bench/bench_sweep_curve_write.py [--points 100] [--rounds 5] [--hogs 2]

A real SQLite study on disk, as a local sweep keeps it, with ``--done`` completed trials
of ``--points`` intermediate values each. A thread plays the judge: it asks the median
pruner about a running trial again and again (each decision reads the study), and records
how long each decision took. Meanwhile the main thread writes a newly finished trial's
whole curve, ``--rounds`` times, two ways:

- ``per point``: one ``trial.report`` (one commit) per value, with a 2 ms pause after
  each, as the judge wrote a finished curve before;
- ``one write``: :func:`airflow_tfk.sweep.study.report_points`, one transaction.

Per curve written, the slowest decision that overlapped the write: how long a pruning
decision landing during it waited. Printed: the median of those over the curves, and the
same measured in the same run while nothing was written (the idle time cut into windows
as long as that way's writes), the ratio to that, and the ratio to the per-point way
(the baseline of what the sweep did); the median over curves, not the maximum,
so one moment the whole process was off the CPU does not decide the figure.
``--hogs`` CPU-bound processes (started and stopped here, by PID) load the machine as a
busy Airflow worker would.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import parser  # noqa: E402

from airflow_tfk.sweep import study as studies  # noqa: E402
from airflow_tfk.sweep.config import SweepConfig  # noqa: E402
from airflow_tfk.sweep.judge import _pruner_says  # noqa: E402

#: The pause the per-point write took after each value (to let the judge in).
PER_POINT_PAUSE = 0.002


def config(points: int) -> SweepConfig:
    return SweepConfig.from_dict(
        {
            "n_trials": 1000,
            "search_space": {"lr": {"type": "float", "low": 0.0, "high": 1.0}},
            "objective": "score",
            "pruner": {"name": "median", "n_startup_trials": 1, "interval_steps": 1},
        }
    )


def curve(points: int, gap: float) -> dict[int, float]:
    return {s: gap + 1.0 / s for s in range(1, points + 1)}


class Judge(threading.Thread):
    """Decides on one running trial without a pause; each decision's (start, seconds)."""

    def __init__(self, study, points: int) -> None:
        super().__init__(daemon=True)
        self.study = study
        self.values = {points // 2: 0.5}
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            _pruner_says(self.study, self.values)
            self.samples.append((t0, time.perf_counter() - t0))

    def during(self, start: float, end: float) -> list[float]:
        """Decisions that overlapped [start, end]."""
        return [d for t0, d in list(self.samples) if t0 <= end and t0 + d >= start]


def per_point(trial, values: dict[int, float]) -> None:
    for step, value in sorted(values.items()):
        trial.report(value, step)
        time.sleep(PER_POINT_PAUSE)


def one_write(trial, values: dict[int, float]) -> None:
    studies.report_points(trial, values)


def main() -> None:
    args = parser(__doc__, points=100, rounds=5, hogs=2, done=3, idle_seconds=3.0).parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    try:
        with tempfile.TemporaryDirectory(prefix="tfk-bench-curve-") as tmp:
            cfg = config(args.points)
            study = studies.open_study(cfg, f"sqlite:///{Path(tmp, 'study.db')}", "bench")
            dists = studies.distributions(cfg)
            for i in range(args.done):
                t = study.ask(dists)
                studies.report_points(t, curve(args.points, 0.1 * i))
                study.tell(t, 0.0)
            judge = Judge(study, args.points)
            judge.start()
            t0 = time.perf_counter()
            time.sleep(args.idle_seconds)
            baseline = judge.during(t0, time.perf_counter())
            results: dict[str, tuple[list[float], list[float]]] = {}
            idle = (t0, time.perf_counter())
            for name, write in (("per point", per_point), ("one write", one_write)):
                worst: list[float] = []
                secs: list[float] = []
                for r in range(args.rounds):
                    t = study.ask(dists)
                    start = time.perf_counter()
                    write(t, curve(args.points, 0.05 * r))
                    end = time.perf_counter()
                    study.tell(t, 0.0)
                    secs.append(end - start)
                    worst.append(max(judge.during(start, end), default=0.0))
                    time.sleep(0.2)
                results[name] = (worst, secs)
            judge.stop.set()
            judge.join()
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print(
        f"{args.points} points per curve, {args.rounds} curves per way, {args.done} finished trials, "
        f"{args.hogs} CPU hogs; baseline: {len(baseline)} decisions while nothing was written, "
        f"median {statistics.median(baseline) * 1000:.1f} ms"
    )
    print(
        f"{'write':<10} {'write s':>8} {'worst decision ms':>17} {'idle ms':>8} {'/idle':>6} "
        f"{'/per point':>10}   (medians over the curves)"
    )
    before = statistics.median(results["per point"][0])
    for name, (worst, secs) in results.items():
        seconds = statistics.median(secs)
        base = idle_worst(judge, idle, seconds)
        mine = statistics.median(worst)
        print(
            f"{name:<10} {seconds:>8.3f} {mine * 1000:>17.1f} {base * 1000:>8.1f} {mine / base:>6.2f} "
            f"{mine / before:>10.2f}"
        )


def idle_worst(judge: Judge, idle: tuple[float, float], window: float) -> float:
    """The median, over windows of ``window`` s of the idle time, of the slowest decision."""
    start, end = idle
    window = max(window, 0.01)
    worst = []
    while start + window <= end:
        worst.append(max(judge.during(start, start + window), default=0.0))
        start += window
    return statistics.median(worst) if worst else float("nan")


if __name__ == "__main__":
    main()
