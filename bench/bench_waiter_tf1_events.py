"""Bytes the wait reads per Job status change: a large TF1 (``legacy_tf1_flags``) cluster
against the same cluster in TF2 form, before and after the launcher builds the host flags
outside ``between_graph``, in one run on a real API server (KWOK control plane).

The wait keeps one Job watch open (backends/_k8s_watch.py); every event carries the whole
Job, pod template included. Per case (mode x TF1/TF2 x before/after) the cluster's Jobs
are created suspended in a namespace of their own (no pods: the measure is the Job's), a
raw watch of that namespace's Jobs, as the wait's, reads the stream, and the Job
controller's first status change of each Job (its ``Suspended`` condition) is one MODIFIED
event: its bytes on the wire are reported, with the part of them that is the container's
args (the host lists, when the pod carries them). "before" renders with the provider's
previous rule (the launcher only in ``between_graph``).

Target: TF1 within 1 kB of TF2 per event in every mode (after).

    echo 19 > /proc/self/autogroup; flock /tmp/tfk-kwok.lock \
        .venv/bin/python bench/bench_waiter_tf1_events.py [--workers 2000]
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any
from unittest import mock

from _common import parser as bench_parser
from _k8s_bench import IMAGE, control_plane, namespace

from airflow_tfk.render.manifests import render
from airflow_tfk.spec import launch_plan as exec_plan
from airflow_tfk.spec.cluster import TFClusterSpec

MODES: dict[str, dict[str, Any]] = {
    "between_graph": {"ps": {"replicas": 16}},
    "parameter_server": {"ps": {"replicas": 16}, "chief": {"replicas": 1}},
    "all_reduce": {},
}
_AFTER = exec_plan.provider_adds_launcher


def _before(spec: TFClusterSpec, role: str) -> bool:
    """The rule the provider had: the launcher only for between_graph."""
    from airflow_tfk.spec.cluster import Mode

    if not spec.legacy_tf1_flags or spec.mode is not Mode.BETWEEN_GRAPH:
        return False
    return exec_plan.launcher_position(exec_plan.role_command(spec, role)) is None


def jobs(ns: str, mode: str, workers: int, tf1: bool, before: bool) -> list[dict[str, Any]]:
    spec = TFClusterSpec.from_dict(
        {
            "name": "big",
            "image": IMAGE,
            "namespace": ns,
            "mode": mode,
            "command": ["python", "/opt/train.py"],
            "legacy_tf1_flags": tf1,
            "worker": {"replicas": workers},
            **MODES[mode],
        }
    )
    with mock.patch.object(exec_plan, "provider_adds_launcher", _before if before else _AFTER):
        out = [m for m in render(spec) if m["kind"] == "Job"]
    for m in out:
        m["spec"]["suspend"] = True
    return out


def measure(api: Any, ns: str, manifests: list[dict[str, Any]], seconds: float) -> list[tuple[str, int, int]]:
    """(Job, bytes of its first MODIFIED event, bytes of its container args) per Job."""
    from kubernetes import client

    batch = client.BatchV1Api(api)
    rv = batch.list_namespaced_job(ns).metadata.resource_version
    lines: list[bytes] = []

    def read() -> None:
        resp = batch.list_namespaced_job(
            ns, watch=True, resource_version=rv, timeout_seconds=int(seconds), _preload_content=False
        )
        buf = b""
        for chunk in resp.stream(65536):
            buf += chunk
            *done, buf = buf.split(b"\n")
            lines.extend(done)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.5)
    for m in manifests:
        batch.create_namespaced_job(ns, m)
    reader.join()
    seen: dict[str, tuple[int, int]] = {}
    for line in lines:
        event = json.loads(line)
        obj = event["object"]
        name = obj["metadata"]["name"]
        if event["type"] == "MODIFIED" and name not in seen:
            args = obj["spec"]["template"]["spec"]["containers"][0].get("args") or []
            seen[name] = (len(line) + 1, len(json.dumps(args, separators=(",", ":"))))
    return [(m["metadata"]["name"], *seen.get(m["metadata"]["name"], (0, 0))) for m in manifests]


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, workers=2000, seconds=8.0)
    a = p.parse_args(argv)
    rows = []
    with control_plane(nodes=1) as cp:
        api = cp.api_client()
        for mode in MODES:
            for when in ("before", "after"):
                for tf1 in (True, False):
                    # namespaces of one length: the addresses (and so the lists) alike
                    ns = namespace(api, f"{mode[:2]}-{when[0]}-tf{1 if tf1 else 2}")
                    got = measure(api, ns, jobs(ns, mode, a.workers, tf1, when == "before"), a.seconds)
                    rows.append((mode, when, "TF1" if tf1 else "TF2", got))
    print(f"\n{a.workers} workers: bytes the wait reads per Job status change (one MODIFIED event)")
    print(f"{'mode':17} {'when':6} {'form':4}  {'per Job: event bytes (args bytes)':60} {'all Jobs':>9}")
    ok = True
    by: dict[tuple[str, str, str], int] = {}
    for mode, when, form, got in rows:
        per = ", ".join(f"{name} {b:,} ({args:,})" for name, b, args in got)
        total = sum(b for _, b, _ in got)
        by[(mode, when, form)] = total
        print(f"{mode:17} {when:6} {form:4}  {per:60} {total:9,}")
        ok &= all(b > 0 for _, b, _ in got)
    for mode in MODES:
        extra = by[(mode, "after", "TF1")] - by[(mode, "after", "TF2")]
        jobs_n = len(next(g for m, w, f, g in rows if m == mode))
        flat = extra < 1000 * jobs_n
        ok &= flat
        print(
            f"{mode}: TF1 - TF2 per status change of every Job: before "
            f"{by[(mode, 'before', 'TF1')] - by[(mode, 'before', 'TF2')]:,} B, after {extra:,} B"
            f" ({'flat' if flat else 'NOT flat'})"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
