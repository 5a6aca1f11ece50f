"""Parse time of each DAG in dags/, against a one-task baseline DAG, in the same run.

Each sample is a fresh interpreter that imports ``airflow.sdk`` first (every DAG file pays
that) and then times executing one DAG file, the way the DAG processor does. Samples of
the DAG and of the baseline alternate, so machine noise hits both alike; the ratio of
minima shows what airflow-tfk adds to a DAG's parse (target: under 2x a trivial DAG).

    .venv/bin/python bench/bench_dags_parse.py [--samples 7]
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from _common import parser as bench_parser
from _common import python_seconds

ROOT = Path(__file__).resolve().parents[1]

BASELINE = """
import pendulum
from airflow.sdk import DAG, task
with DAG("baseline", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    @task
    def hello():
        return 1
    hello()
"""

TIMER = """
import runpy, sys, time
import airflow.sdk
t0 = time.perf_counter()
runpy.run_path({path!r}, run_name="dag_under_test")
print(time.perf_counter() - t0)
"""


def sample(path: Path) -> float:
    return python_seconds(TIMER.format(path=str(path)))


def main() -> int:
    parser = bench_parser(__doc__, samples=7)
    args = parser.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        baseline = Path(tmp, "baseline_dag.py")
        baseline.write_text(BASELINE)
        sample(baseline)  # warm caches outside the measurement
        for dag in sorted((ROOT / "dags").glob("*.py")):
            sample(dag)  # the first run writes the bytecode of what the DAG imports
            ours, base = [], []
            for _ in range(args.samples):
                ours.append(sample(dag))
                base.append(sample(baseline))
            # The minimum is the least noisy estimate of the intrinsic cost on a shared
            # machine; the median is shown too.
            lo, lb = min(ours), min(base)
            ratio = lo / lb
            worst = max(worst, ratio)
            print(
                f"{dag.name:<28} min {lo * 1000:7.1f} ms (median {statistics.median(ours) * 1000:7.1f})"
                f"   baseline min {lb * 1000:7.1f} ms (median {statistics.median(base) * 1000:7.1f})"
                f"   ratio {ratio:.2f}"
            )
    print(f"worst ratio {worst:.2f} (target < 2.00)")
    return 0 if worst < 2.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
