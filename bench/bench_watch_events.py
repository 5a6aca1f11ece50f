"""Pod events per second through ClusterTracker, the status code of a pod stream, without a server:
600 workers + 8 PS of a between_graph cluster go from running to succeeded (one
MODIFIED event per worker, ~5 kB of JSON each, decoded per event as on the wire).

Measured in CPU time of this (single-threaded) process, so a busy machine does not
blur it. Compared, in the same run, with re-interpreting the whole pod list per event, then
comparing the whole status with the last one and judging it (what the watch did before
the ClusterTracker): the ratio is the speed-up per event.

    .venv/bin/python bench/bench_watch_events.py [--workers 600] [--ps 8]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "backends"))

from _common import parser as bench_parser
from pods import T0_EPOCH, job, pod, scheduled, with_status

from airflow_tfk.backends.kubernetes.cluster import ClusterTracker, Interpreter
from airflow_tfk.backends.kubernetes.status import job_info
from airflow_tfk.run.policies import Outcome, evaluate
from airflow_tfk.spec.cluster import Mode

PADDING = "x" * 3000  # managedFields and the rest of a real pod: events are ~5 kB


def scenario(workers: int, ps: int) -> tuple[list[dict], list[bytes], dict]:
    pods = [pod("worker", i, "Running", conditions=[scheduled()]) for i in range(workers)]
    pods += [pod("ps", i, "Running", conditions=[scheduled()]) for i in range(ps)]
    for p in pods:
        p["metadata"]["annotations"]["padding"] = PADDING
    events = [
        json.dumps({"type": "MODIFIED", "object": with_status(p, "Succeeded")}).encode()
        for p in pods[:workers]
    ]
    info = job_info(job("worker", workers))
    assert info is not None
    return pods, events, {"worker": info}


def incremental(pods: list[dict], events: list[bytes], jobs: dict, replicas: dict) -> tuple[float, Outcome]:
    tracker = ClusterTracker(Interpreter(300, 120))
    tracker.reset(pods, jobs)
    tracker.snapshot()
    outcome = Outcome.RUNNING
    t0 = time.process_time()
    for line in events:
        tracker.upsert(json.loads(line)["object"], time.time())
        if tracker.changed:
            status = tracker.status(time.time())
            status.summary()
            outcome = evaluate(Mode.BETWEEN_GRAPH, replicas, status).outcome
    return time.process_time() - t0, outcome


def from_scratch(pods: list[dict], events: list[bytes], jobs: dict, replicas: dict) -> tuple[float, Outcome]:
    interp = Interpreter(300, 120)
    current = {p["metadata"]["uid"]: p for p in pods}
    last = None
    outcome = Outcome.RUNNING
    t0 = time.process_time()
    for line in events:
        obj = json.loads(line)["object"]
        current[obj["metadata"]["uid"]] = obj
        status, _ = interp.status(current.values(), jobs, T0_EPOCH)
        if status != last:
            last = status
            status.summary()
            outcome = evaluate(Mode.BETWEEN_GRAPH, replicas, status).outcome
    return time.process_time() - t0, outcome


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, workers=600, ps=8)
    a = p.parse_args(argv)
    replicas = {"worker": a.workers, "ps": a.ps}
    pods, events, jobs = scenario(a.workers, a.ps)
    new_s, new_outcome = min(incremental(pods, events, jobs, replicas) for _ in range(3))
    old_s, old_outcome = from_scratch(pods, events, jobs, replicas)
    assert new_outcome is old_outcome is Outcome.SUCCEEDED, (new_outcome, old_outcome)
    n = len(events)
    print(f"watch status code, {a.workers} workers + {a.ps} PS, {n} pod events (decode included):")
    print(f"  incremental (ClusterTracker): {n / new_s:,.0f} events/s of CPU ({new_s * 1000:.0f} ms)")
    print(f"  whole status per event (baseline, same run): {n / old_s:,.0f} events/s ({old_s * 1000:.0f} ms)")
    print(f"  speed-up per event: {old_s / new_s:.0f}x")
    print(
        json.dumps({"events": n, "events_per_s": round(n / new_s), "baseline_events_per_s": round(n / old_s)})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
