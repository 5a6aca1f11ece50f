"""API requests while waiting 60 s on a running TF cluster, on a real API server.

- airflow-tfk: the wait's watcher (one Job list, one pod list, then one pod watch for the
  whole cluster and the whole wait), measured on a running cluster of 600 workers + 8 PS
  and, in the same window, on one of 60 workers (the count must not depend on the size);
  and the operator's blocking wait (``watch.wait_for_cluster``) with its default progress
  interval (30 s: a log read of the progress task, which KWOK's fake kubelets answer with
  500, retried once).
- airflow-tfk deferrable: the real ``TFClusterDoneTrigger`` (the same wait, awaited; its
  client is the cncf AsyncKubernetesHook's) on the 600-worker cluster, with a 60 s deadline.
- baseline: the seeds' layout (one Job per worker) waited on with the cncf provider's
  ``KubernetesHook.wait_until_job_complete`` (one GET per Job every ``job_poll_interval``
  = 10 s, its default), one call per worker Job, as a DAG with a sensor per Job would.
  The baseline's Jobs are created suspended: its request count does not depend on their
  pods, and 600 more pods would only slow the 2-core machine.

Requests are counted per client at the HTTP layer (each wait: by the thread its event
loop runs in); a watch request counts once.
Target: airflow-tfk <= 3 requests/minute whatever the task count.

    .venv/bin/python bench/bench_k8s_wait.py [--workers 600] [--seconds 60]
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from _common import parser as bench_parser
from _k8s_bench import (
    CONN_ID,
    IMAGE,
    RequestCounter,
    control_plane,
    install,
    install_async,
    namespace,
    seeds_layout,
    wait_pods_running,
)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, workers=600, small=60, ps=8, seconds=60.0)
    a = p.parse_args(argv)
    logging.disable(logging.INFO)  # 600 polling hooks log two lines per poll

    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes.utils import create_from_dict

    from airflow_tfk.backends.base import ClusterRef
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.run.wait import wait_for_cluster
    from airflow_tfk.spec.cluster import Mode, TFClusterSpec

    with control_plane() as cp:
        admin = cp.api_client()
        ns = namespace(admin, "bench-tfk")
        sizes = {"big": a.workers, "small": a.small}
        setup = KubernetesBackend(conn_id=CONN_ID)
        for name, workers in sizes.items():
            setup.create(
                TFClusterSpec.from_dict(
                    {
                        "name": name,
                        "namespace": ns,
                        "image": IMAGE,
                        "mode": "between_graph",
                        "command": ["python", "/opt/train.py"],
                        "worker": {"replicas": workers},
                        "ps": {"replicas": a.ps},
                    }
                )
            )
        t_run = wait_pods_running(admin, ns, sum(sizes.values()) + 2 * a.ps, timeout=600)
        print(f"setup: {sum(sizes.values()) + 2 * a.ps} pods running after {t_run:.0f} s", file=sys.stderr)

        ns_seeds = namespace(admin, "bench-seeds")
        jobs = [d for d in seeds_layout("imagenet", a.workers, 0) if d["kind"] == "Job"]
        for d in jobs:
            d["spec"]["suspend"] = True
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda d: create_from_dict(admin, d, namespace=ns_seeds), jobs))

        counters = {"cncf": install(RequestCounter())}
        for k in ("watch-big", "watch-small", "operator-wait-big"):
            counters[k] = install_async(RequestCounter(), thread=k)
        backends = {k: KubernetesBackend(conn_id=CONN_ID) for k in counters if k != "cncf"}
        hook = KubernetesHook(conn_id=CONN_ID)
        counters["cncf"].watch(hook.api_client)

        def watch_only(key: str, cluster: str) -> None:
            async def statuses() -> None:
                async with backends[key].watcher(ClusterRef(cluster, ns)) as watcher:
                    end = time.monotonic() + a.seconds
                    while time.monotonic() < end:
                        await watcher.next(end - time.monotonic())

            asyncio.run(statuses())

        def operator_wait(key: str, cluster: str) -> None:
            wait_for_cluster(
                backends[key],
                ClusterRef(cluster, ns),
                Mode.BETWEEN_GRAPH,
                {"ps": a.ps, "worker": sizes[cluster]},
                timeout=a.seconds,
                progress_interval=30.0,
                emit=lambda m: None,
            )

        threads = [
            threading.Thread(target=watch_only, args=("watch-big", "big"), name="watch-big"),
            threading.Thread(target=watch_only, args=("watch-small", "small"), name="watch-small"),
            threading.Thread(
                target=operator_wait, args=("operator-wait-big", "big"), name="operator-wait-big"
            ),
        ]
        threads += [
            threading.Thread(
                target=hook.wait_until_job_complete, daemon=True, args=(d["metadata"]["name"], ns_seeds, 10)
            )
            for d in jobs
        ]
        from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

        counters["trigger-big"] = install_async(RequestCounter(), thread="trigger-big")
        trigger = TFClusterDoneTrigger(
            cluster={"name": "big", "namespace": ns},
            backend_kind="kubernetes",
            backend_config={"conn_id": CONN_ID},
            mode="between_graph",
            replicas={"ps": a.ps, "worker": a.workers},
            deadline=time.time() + a.seconds,
            progress_interval=30.0,
        )
        events: list = []

        async def run_trigger() -> None:
            async for event in trigger.run():
                events.append(event.payload)
                return

        threads.append(threading.Thread(target=lambda: asyncio.run(run_trigger()), name="trigger-big"))
        t0 = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(a.seconds)
        t1 = time.monotonic()
        logging.disable(logging.CRITICAL)  # the polling threads outlive the control plane
        for t in threads[:3] + threads[-1:]:
            t.join(30)
        assert events and events[0]["status"] == "timeout", events
        per_min = {k: c.count(t0, t1) * 60 / (t1 - t0) for k, c in counters.items()}

    print(
        f"API requests while waiting {a.seconds:.0f} s on a running cluster (kube-apiserver v1.36, "
        f"KWOK), one run:"
    )
    print(
        f"  airflow-tfk watch, {a.workers} workers + {a.ps} PS: "
        f"{per_min['watch-big']:6.1f} req/min  {counters['watch-big'].summary(t0, t1)}"
    )
    print(
        f"  airflow-tfk watch, {a.small} workers + {a.ps} PS:  "
        f"{per_min['watch-small']:6.1f} req/min  {counters['watch-small'].summary(t0, t1)}"
    )
    print(
        f"  airflow-tfk blocking wait incl. progress log reads every 30 s, {a.workers} workers: "
        f"{per_min['operator-wait-big']:6.1f} req/min  "
        f"{counters['operator-wait-big'].summary(t0, t1)}"
    )
    print(
        f"  airflow-tfk deferrable trigger (the same wait, awaited), {a.workers} workers: "
        f"{per_min['trigger-big']:6.1f} req/min  {counters['trigger-big'].summary(t0, t1)}"
    )
    print(
        f"  cncf KubernetesHook.wait_until_job_complete x {len(jobs)} Jobs (poll 10 s): "
        f"{per_min['cncf']:8.1f} req/min"
    )
    print(
        f"  ratio: {per_min['cncf'] / max(per_min['watch-big'], 1e-9):.0f}x fewer requests "
        f"(target <= 3 req/min for the watch: {'met' if per_min['watch-big'] <= 3 else 'MISSED'})"
    )
    return 0 if per_min["watch-big"] <= 3 and per_min["watch-small"] <= 3 else 1


if __name__ == "__main__":
    sys.exit(main())
