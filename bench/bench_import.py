"""Import and DAG-parse cost of the provider, against the cncf KubernetesJobOperator.

Each sample is a fresh interpreter that first imports ``airflow.sdk`` (the cost every DAG
pays anyway), then times only what comes on top of it:

- import: ``from airflow_tfk.operators.training import TFTrainingOperator`` vs
  ``from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator``;
- parse: executing a small DAG file that uses one or the other.

Samples alternate between the two so machine noise hits both alike; the medians are
compared as a ratio (target: ours adds at most a tenth of what the cncf import adds).

    .venv/bin/python bench/bench_import.py [--samples 9]
"""

from __future__ import annotations

import statistics
import tempfile
import textwrap
from pathlib import Path

from _common import parser as bench_parser
from _common import python_seconds

ROOT = Path(__file__).resolve().parents[1]

TIMER = """
import time, airflow.sdk
t0 = time.perf_counter()
{body}
print(time.perf_counter() - t0)
"""

OURS_DAG = """
import pendulum
from airflow.sdk import DAG
from airflow_tfk.operators.training import TFTrainingOperator
with DAG("bench_ours", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    TFTrainingOperator(task_id="train", backend="kubernetes", cluster_spec={
        "image": "tensorflow/tensorflow:2.21.0", "command": ["python", "/app/train.py"],
        "mode": "between_graph", "ps": {"replicas": 2}, "worker": {"replicas": 4}})
"""

CNCF_DAG = """
import pendulum
from airflow.sdk import DAG
from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
with DAG("bench_cncf", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    KubernetesJobOperator(task_id="train", image="tensorflow/tensorflow:2.21.0",
                          cmds=["python", "/app/train.py"], parallelism=4, completions=4)
"""


def sample(body: str) -> float:
    return python_seconds(TIMER.format(body=body))


def compare(name: str, ours: str, theirs: str, samples: int) -> float:
    a: list[float] = []
    b: list[float] = []
    sample(ours)  # the first run writes the bytecode; the samples then read it
    sample(theirs)
    for _ in range(samples):
        a.append(sample(ours))
        b.append(sample(theirs))
    ma, mb = statistics.median(a), statistics.median(b)
    ratio = ma / mb if mb > 0 else float("inf")
    print(
        f"{name:<8} airflow-tfk {ma * 1000:8.1f} ms   cncf {mb * 1000:8.1f} ms   "
        f"ratio {ratio:.3f}   (target <= 0.100; medians of {samples})"
    )
    return ratio


def main() -> int:
    parser = bench_parser(__doc__, samples=9)
    args = parser.parse_args()
    sample("pass")  # warm the bytecode caches once, outside the measurement
    with tempfile.TemporaryDirectory() as tmp:
        ours_dag, cncf_dag = Path(tmp, "ours_dag.py"), Path(tmp, "cncf_dag.py")
        ours_dag.write_text(textwrap.dedent(OURS_DAG))
        cncf_dag.write_text(textwrap.dedent(CNCF_DAG))
        r1 = compare(
            "import",
            "from airflow_tfk.operators.training import TFTrainingOperator",
            "from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator",
            args.samples,
        )
        r2 = compare(
            "parse",
            f"import runpy; runpy.run_path({str(ours_dag)!r})",
            f"import runpy; runpy.run_path({str(cncf_dag)!r})",
            args.samples,
        )
    return 0 if max(r1, r2) <= 0.1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
