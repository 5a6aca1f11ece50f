"""Create a TF cluster of 600 workers and 8 PS on a real API server: airflow-tfk's layout
(server-side apply of 2 headless Services and 2 Indexed Jobs, PS and workers) vs the seeds'
one-Service-per-task layout (a Service + a Job per worker, a Service + a Deployment per
PS: 1,216 objects) created with ``kubernetes.utils.create_from_yaml``, the way the cncf
provider's KubernetesCreateResourceOperator does. Same control plane, same run.

Measured: wall time of the create call(s) and the HTTP requests sent (counted at the
client's urllib3 layer); then, for information, how long the controllers and KWOK take
until every task's pod runs. Target: ours >= 20x faster.

    .venv/bin/python bench/bench_k8s_create.py [--workers 600] [--ps 8]
"""

from __future__ import annotations

import statistics
import sys
import time

from _common import parser as bench_parser
from _k8s_bench import (
    CONN_ID,
    RequestCounter,
    cluster_spec,
    control_plane,
    install,
    namespace,
    seeds_layout,
    wait_no_pods,
    wait_pods_running,
)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser(__doc__, workers=600, ps=8)
    p.add_argument("--repeat", type=int, default=3, help="creates of our layout (median)")
    a = p.parse_args(argv)

    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes.utils import create_from_yaml

    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.spec.cluster import TFClusterSpec

    tasks = a.workers + a.ps
    with control_plane() as cp:
        admin = cp.api_client()
        counter = install(RequestCounter())

        # -- ours: render + server-side apply, through the provider's backend ---------------
        ns = namespace(admin, "bench-tfk")
        backend = KubernetesBackend(conn_id=CONN_ID)
        counter.watch(backend.hook.api_client)  # client built outside the timing, like below
        times, requests = [], []
        from airflow_tfk.backends.base import ClusterRef
        from airflow_tfk.render.manifests import render

        for i in range(a.repeat):  # each from an idle control plane; the last one is kept
            spec = TFClusterSpec.from_dict(
                cluster_spec(ns, a.workers, a.ps, name=f"imagenet-{i}", legacy_tf1_flags=True)
            )
            counter.reset()
            t0 = time.perf_counter()
            backend.create(spec)
            times.append(time.perf_counter() - t0)
            requests.append(counter.count())
            if i < a.repeat - 1:
                backend.delete(ClusterRef(spec.name, ns))
                wait_no_pods(admin, ns)
        objects = len(render(spec))
        ours_running = times[-1] + wait_pods_running(admin, ns, tasks)
        ours_t, ours_req = statistics.median(times), statistics.median(requests)

        # -- the seeds' layout with create_from_yaml (cncf resource operator) ---------------
        ns_seeds = namespace(admin, "bench-seeds")
        seeds_client = counter.watch(KubernetesHook(conn_id=CONN_ID).api_client)
        docs = seeds_layout("imagenet", a.workers, a.ps)
        counter.reset()
        t0 = time.perf_counter()
        create_from_yaml(k8s_client=seeds_client, yaml_objects=docs, namespace=ns_seeds)
        seeds_t = time.perf_counter() - t0
        seeds_req = counter.count()
        seeds_running = seeds_t + wait_pods_running(admin, ns_seeds, tasks)

    print(
        f"create a cluster of {a.workers} workers + {a.ps} PS against kube-apiserver v1.36 "
        f"(KWOK nodes), one run:"
    )
    print(
        f"  airflow-tfk (render + server-side apply, {objects} objects): "
        f"{ours_t * 1000:8.1f} ms, {ours_req:5.0f} requests  (median of {a.repeat}: "
        f"{', '.join(f'{t * 1000:.1f}' for t in times)} ms; the first renders cold)"
    )
    print(
        f"  seeds' layout, create_from_yaml ({len(docs)} objects):        "
        f"{seeds_t * 1000:8.1f} ms, {seeds_req:5d} requests"
    )
    print(
        f"  ratio: {seeds_t / ours_t:.0f}x faster, {seeds_req / ours_req:.0f}x fewer requests "
        f"(target >= 20x faster)"
    )
    print(
        f"  (from the create call until all {tasks} pods ran: airflow-tfk {ours_running:.0f} s, "
        f"seeds {seeds_running:.0f} s; the controllers make the same {tasks} pods either way)"
    )
    return 0 if seeds_t / ours_t >= 20 else 1


if __name__ == "__main__":
    sys.exit(main())
