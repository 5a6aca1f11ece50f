"""Import and DAG-parse cost of this checkout against another one, side by side in one run.

For a change that moves code without meaning to change what it costs (e.g. a new package
layout): each sample is a fresh interpreter that imports ``airflow.sdk`` first (every DAG
pays that), then times importing the operator, or executing one DAG file of ``dags/``, from
one checkout or the other. Samples alternate between the checkouts, so machine noise hits
both alike; the ratio of minima (this / other) is the verdict (target: within 10%).

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/bench_checkouts.py --other /tmp/before [--samples 7]
"""

from __future__ import annotations

import statistics
from pathlib import Path

from _common import parser as bench_parser
from _common import python_seconds

ROOT = Path(__file__).resolve().parents[1]

IMPORT = """
import time, airflow.sdk
t0 = time.perf_counter()
from airflow_tfk.operators.training import TFTrainingOperator
print(time.perf_counter() - t0)
"""

PARSE = """
import runpy, sys, time
import airflow.sdk
t0 = time.perf_counter()
runpy.run_path({path!r}, run_name="dag_under_test")
print(time.perf_counter() - t0)
"""


def compare(name: str, code: dict[Path, str], samples: int) -> float:
    for checkout, snippet in code.items():
        python_seconds(snippet, checkout)  # bytecode and caches, outside the measurement
    times: dict[Path, list[float]] = {checkout: [] for checkout in code}
    for _ in range(samples):
        for checkout, snippet in code.items():
            times[checkout].append(python_seconds(snippet, checkout))
    this, other = (times[c] for c in code)
    ratio = min(this) / min(other)
    print(
        f"{name:<30} this min {min(this) * 1000:7.1f} ms (median {statistics.median(this) * 1000:7.1f})"
        f"   other min {min(other) * 1000:7.1f} ms (median {statistics.median(other) * 1000:7.1f})"
        f"   ratio {ratio:.2f}"
    )
    return ratio


def main() -> int:
    p = bench_parser(__doc__, samples=7)
    p.add_argument("--other", type=Path, required=True, help="the other checkout (e.g. a worktree)")
    p.add_argument("--dags", default="*.py", help="which DAG files of dags/ (a glob; default: all)")
    args = p.parse_args()
    other = args.other.resolve()
    if not (other / "airflow_tfk" / "__init__.py").is_file():
        p.error(f"--other: {other} holds no airflow_tfk package")
    ratios = [compare("import TFTrainingOperator", {ROOT: IMPORT, other: IMPORT}, args.samples)]
    for dag in sorted((ROOT / "dags").glob(args.dags)):
        before = other / "dags" / dag.name
        if not before.is_file():
            continue
        ratios.append(
            compare(
                dag.name,
                {ROOT: PARSE.format(path=str(dag)), other: PARSE.format(path=str(before))},
                args.samples,
            )
        )
    worst = max(ratios)
    print(f"worst ratio {worst:.2f} (target <= 1.10)")
    return 0 if worst <= 1.10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
