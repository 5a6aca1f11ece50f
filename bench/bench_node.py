"""The real node (tests/k8s_node) against the local backend, same spec, same run:

- create -> every task Running (pods Running / processes started),
- create -> the first training step (the first progress line in worker-0's log),
- PS clean-up latency: ``delete_roles(["ps"])`` after the workers succeeded -> no PS pod
  (Kubernetes) / process (local) left; on the node also no PS container process.

Real TensorFlow (digits_app, all workers asynchronous on the PS, between_graph) at
(1 PS, 2 workers) and at the largest size the tier allows (1 PS, 3 workers: ~4 TF pods).
Prints one line per size and measure with the ratio kubernetes/local.

    .venv/bin/python bench/bench_node.py [--sizes 1x2,1x3] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _wait(fn, timeout: float = 300, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(every)
    raise TimeoutError(fn)


def _spec(name: str, namespace: str, ps: int, workers: int, steps: int, image: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "image_pull_policy": "Never",
        "namespace": namespace,
        "mode": "between_graph",
        "command": ["python", "-m", "airflow_tfk.runtime.examples.digits_app"],
        "args": ["--tfk_steps", str(steps), "--tfk_checkpoint_every", "0"],
        "ps": {"replicas": ps},
        "worker": {"replicas": workers},
        "ps_grace_seconds": 0,
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"},
    }


def _measure(backend, spec_data: dict[str, Any], running, ps_gone, worker0_log) -> dict[str, float]:
    from airflow_tfk.core.status import Phase
    from airflow_tfk.spec.cluster import TFClusterSpec

    spec = TFClusterSpec.from_dict(spec_data)
    t0 = time.monotonic()
    ref = backend.create(spec)
    try:
        _wait(lambda: running(ref))
        t_running = time.monotonic() - t0

        def first_step() -> bool:
            return '"step"' in worker0_log(ref)

        _wait(first_step, every=0.2)
        t_step = time.monotonic() - t0

        def workers_done() -> bool:
            st = backend.status(ref)
            ws = [t for t in st.tasks if t.role == "worker"]
            if any(t.phase is Phase.FAILED for t in ws):
                raise RuntimeError(f"a worker failed: {st.summary()}")
            return bool(ws) and all(t.phase is Phase.SUCCEEDED for t in ws)

        _wait(workers_done, timeout=600, every=0.2)
        t1 = time.monotonic()
        backend.delete_roles(ref, ["ps"])
        _wait(lambda: ps_gone(ref), timeout=120, every=0.05)
        t_cleanup = time.monotonic() - t1
    finally:
        backend.delete(ref)
    return {"running": t_running, "first_step": t_step, "ps_cleanup": t_cleanup}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1x2,1x3", help="PSxWORKERS,...")
    p.add_argument("--steps", type=int, default=60)
    a = p.parse_args(argv)
    logging.disable(logging.INFO)

    from k8s_node import node as nodemod
    from kubernetes import client

    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.core import naming
    from airflow_tfk.core.status import Phase

    node = nodemod.Node.start(log=lambda m: print(m, file=sys.stderr))
    results = []
    try:
        api = node.api_client()
        core = client.CoreV1Api(api)
        ns = f"bench-{uuid.uuid4().hex[:6]}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        k8s = KubernetesBackend(config_file=str(node.kubeconfig))
        local_root = tempfile.mkdtemp(prefix="tfk-bench-node-")
        local = LocalBackend(local_root)

        def k8s_pods(ref, role: str | None = None):
            sel = f"{naming.LABEL_CLUSTER}={ref.name}"
            if role is not None:
                sel += f",{naming.LABEL_ROLE}={role}"
            return core.list_namespaced_pod(ns, label_selector=sel).items

        def k8s_worker0_log(ref) -> str:
            # Straight from the pod (the backend's own log read follows its watch's pods).
            for p in k8s_pods(ref, "worker"):
                if (p.metadata.labels or {}).get("batch.kubernetes.io/job-completion-index") == "0":
                    if p.status.phase in ("Running", "Succeeded", "Failed"):
                        r = core.read_namespaced_pod_log(p.metadata.name, ns, _preload_content=False)
                        return r.data.decode()
            return ""

        for size in a.sizes.split(","):
            n_ps, n_w = (int(x) for x in size.split("x"))
            row: dict[str, Any] = {"ps": n_ps, "workers": n_w}
            name = f"bn-{uuid.uuid4().hex[:6]}"
            want = n_ps + n_w
            row["kubernetes"] = _measure(
                k8s,
                _spec(name, ns, n_ps, n_w, a.steps, nodemod.TRAIN_IMAGE),
                lambda ref, want=want: (
                    len(ps := k8s_pods(ref)) == want and all(p.status.phase == "Running" for p in ps)
                ),
                lambda ref: not k8s_pods(ref, "ps") and not _ps_containers(node),
                k8s_worker0_log,
            )
            name = f"bl-{uuid.uuid4().hex[:6]}"

            def local_running(ref, want=want) -> bool:
                st = local.status(ref)
                return len(st.tasks) == want and all(t.phase is Phase.RUNNING for t in st.tasks)

            def local_ps_gone(ref) -> bool:
                return all(t.phase is not Phase.RUNNING for t in local.status(ref).tasks if t.role == "ps")

            row["local"] = _measure(
                local,
                _spec(name, "default", n_ps, n_w, a.steps, "local/unused:1"),
                local_running,
                local_ps_gone,
                lambda ref: local.logs(ref, "worker", 0),
            )
            for key in ("running", "first_step", "ps_cleanup"):
                kv, lv = row["kubernetes"][key], row["local"][key]
                print(
                    f"{n_ps} PS x {n_w} workers  {key:<11} kubernetes {kv:7.2f}s  local {lv:7.2f}s  "
                    f"ratio {kv / lv if lv else float('inf'):6.2f}"
                )
            results.append(row)
        print(json.dumps(results))
    finally:
        if "local_root" in locals():
            shutil.rmtree(local_root, ignore_errors=True)
        node.stop()
        left = node.leftovers(removed=False)
        node.remove()
        if left:
            print(f"left behind: {left}", file=sys.stderr)
    return 0


def _ps_containers(node) -> bool:
    """Any container process of a PS left (the pause and server processes of its pod)."""
    return bool(node.container_processes()) and _any_ps_process(node)


def _any_ps_process(node) -> bool:
    for pid in node.container_processes():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"TFK_ROLE=ps\x00" in env:
            return True
    return False


if __name__ == "__main__":
    sys.exit(main())
