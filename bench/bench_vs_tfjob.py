"""airflow-tfk side by side with Kubeflow's TFJob (training-operator v1.9), on one control
plane: the same cluster (W workers + P PS, between-graph) run three ways, one after the
other, on the same kube-apiserver v1.36 with KWOK nodes:

- ``jobs``: TFTrainingOperator, the provider's default layout (headless Services, the PS,
  an Indexed Job of workers), driven by the real kube-controller-manager;
- ``jobset``: TFTrainingOperator with ``layout: jobset`` (one JobSet), driven by the real
  JobSet v0.11.0 controller (tests/k8s/jobset/build.sh);
- ``tfjob``: one TFJob (``successPolicy: AllWorkers``, ``cleanPodPolicy: Running``, so it
  ends like the provider: done when every worker is, then the PS go), driven by the real
  training-operator v1.9.3 built from its Go module (tests/k8s/tfjob/build.sh: once,
  ~10 CPU-minutes; no test needs it), with only the TFJob scheme and no gang scheduler.

Measured for each:
- objects: what the client created, and every object in the namespace once all pods run
  and the count has stood still for 3 s (pods, Services, EndpointSlices, Endpoints, Jobs,
  StatefulSets, ControllerRevisions, JobSets, TFJobs...; events not counted; the
  namespace's own ConfigMap/ServiceAccount subtracted), and how long after the create the
  last of them appeared;
- API requests: those of the client (the operator's whole run: create, wait, clean-up;
  for TFJob: the create and a watch of its status until it succeeds, the least any
  client can do), and those the API server served in all (``apiserver_request_total``,
  every client: controllers, scheduler, KWOK's fake kubelets), minus the bench's own;
- create -> every pod Running;
- the last worker's completion -> no PS pod left (the provider's ``ps_grace_seconds`` is 0
  here, TFJob deletes running pods when it succeeds).
Workers are completed by annotating their pods (KWOK's stages, tests/k8s/stages.yaml)
from a child process that also observes the completions and the PS' removal.

The controllers get the same client rate limits: kube-controller-manager runs with
``--kube-api-qps=100 --kube-api-burst=200`` (bench/_k8s_bench.py), training-operator with
``--kube-api-qps=100 --kube-api-burst=150`` (``--tfjob-qps``; its default is 20),
JobSet with its defaults (500/500).

    .venv/bin/python bench/bench_vs_tfjob.py [--workers 600] [--ps 8] [--only jobs,jobset,tfjob]
    .venv/bin/python bench/bench_vs_tfjob.py --workers 8 --ps 1     # a quick run
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import queue
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from _k8s_bench import (
    IMAGE,
    RequestCounter,
    control_plane,
    install,
    namespace,
    training_operator,
    wait_no_pods,
    wait_pods_running,
)

MP = multiprocessing.get_context("spawn")
SYSTEMS = ("jobs", "jobset", "tfjob")
TFJOB_LABELS = "training.kubeflow.org"

#: namespaced kinds counted as objects (group/version, plural)
KINDS = (
    ("v1", "pods"),
    ("v1", "services"),
    ("v1", "endpoints"),
    ("v1", "configmaps"),
    ("v1", "secrets"),
    ("v1", "serviceaccounts"),
    ("discovery.k8s.io/v1", "endpointslices"),
    ("apps/v1", "statefulsets"),
    ("apps/v1", "controllerrevisions"),
    ("apps/v1", "deployments"),
    ("batch/v1", "jobs"),
    ("networking.k8s.io/v1", "networkpolicies"),
    ("policy/v1", "poddisruptionbudgets"),
    ("jobset.x-k8s.io/v1alpha2", "jobsets"),
    ("kubeflow.org/v1", "tfjobs"),
)


@dataclass
class Result:
    system: str
    client_objects: int = 0
    objects: dict[str, int] = field(default_factory=dict)
    client_requests: int = 0
    server_requests: int = 0
    to_running: float = 0.0
    to_settled: float = 0.0
    ps_gone: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def all_objects(self) -> int:
        return sum(self.objects.values())


def _get(api: Any, path: str) -> Any:
    resp = api.call_api(
        path, "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
    )
    return (resp[0] if isinstance(resp, tuple) else resp).data


def count_objects(api: Any, ns: str) -> dict[str, int]:
    """Objects of each kind in the namespace (one cheap list each: ``limit=1`` and the
    server's remainingItemCount)."""
    out = {}
    for gv, plural in KINDS:
        base = "/api/v1" if gv == "v1" else f"/apis/{gv}"
        try:
            body = json.loads(_get(api, f"{base}/namespaces/{ns}/{plural}?limit=1"))
        except Exception:  # the kind is not served (JobSet/TFJob CRD not installed)
            continue
        n = len(body.get("items") or []) + int((body.get("metadata") or {}).get("remainingItemCount") or 0)
        if n:
            out[plural] = n
    return out


def settled_objects(
    api: Any, ns: str, quiet: float = 3.0, timeout: float = 300
) -> tuple[dict[str, int], float]:
    """The namespace's objects once their count has not changed for ``quiet`` seconds (a
    controller may still be making Services after the last pod runs), and when it last
    changed (seconds from now)."""
    t0 = time.monotonic()
    last, changed = count_objects(api, ns), t0
    while time.monotonic() - changed < quiet and time.monotonic() - t0 < timeout:
        time.sleep(0.5)
        now = count_objects(api, ns)
        if now != last:
            last, changed = now, time.monotonic()
    return last, changed - t0


def server_requests(api: Any) -> float:
    """Every request the API server has served so far (apiserver_request_total)."""
    total = 0.0
    for line in _get(api, "/metrics").decode().splitlines():
        if line.startswith("apiserver_request_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def drive(kubeconfig: str, ns: str, workers_sel: str, ps_sel: str, workers: int, results: Any) -> None:
    """In a child process: complete every worker (bench_k8s_cleanup.drive_cluster: KWOK
    annotation + an observer of when each turned Succeeded), then poll (10/s) until no PS
    pod is left. Times are CLOCK_MONOTONIC, the parent's clock. Reports its own request
    count so the parent can leave it out of the server's total."""
    from bench_k8s_cleanup import drive_cluster
    from kubernetes import client, config

    counter = install(RequestCounter())
    original = config.new_client_from_config

    def counted(*args: Any, **kwargs: Any) -> Any:
        return counter.watch(original(*args, **kwargs))

    config.new_client_from_config = counted
    inner: queue.Queue = queue.Queue()
    drive_cluster(kubeconfig, ns, workers_sel, workers, inner)
    done, _annotate_s, _relists = inner.get()
    core = client.CoreV1Api(counted(config_file=kubeconfig))
    deadline = time.monotonic() + 600
    gone = float("nan")
    while time.monotonic() < deadline:
        if not core.list_namespaced_pod(ns, label_selector=ps_sel).items:
            gone = time.monotonic()
            break
        time.sleep(0.1)
    results.put((done, gone, counter.count()))


class System:
    """One way to run the cluster: start it, the pods' selectors, wait for its client."""

    name = ""

    def __init__(self, ns: str, a: argparse.Namespace, counter: RequestCounter) -> None:
        self.ns, self.a, self.counter = ns, a, counter

    def start(self) -> None:
        raise NotImplementedError

    def selectors(self) -> tuple[str, str]:
        raise NotImplementedError

    def finish(self, timeout: float) -> None:
        raise NotImplementedError


class Provider(System):
    """TFTrainingOperator (blocking execute, in a thread) with the given layout."""

    def __init__(self, layout: str, *args: Any) -> None:
        super().__init__(*args)
        self.name = self.layout = layout
        self.result: dict[str, Any] = {}
        self.error: list[BaseException] = []

    def start(self) -> None:
        from airflow_tfk.core import naming

        run_id = f"manual__{self.layout}"
        ti = SimpleNamespace(dag_id="bench", task_id="train", run_id=run_id, map_index=-1, try_number=1)
        self.cluster = naming.RunIdentity("bench", "train", run_id, -1).cluster_name()
        op = training_operator(self.ns, self.a.workers, self.a.ps, ps_grace_seconds=0, layout=self.layout)

        def run() -> None:
            try:
                self.result.update(op.execute({"ti": ti}))
            except BaseException as exc:  # reported by finish()
                self.error.append(exc)

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def selectors(self) -> tuple[str, str]:
        from airflow_tfk.core import naming

        base = f"{naming.LABEL_CLUSTER}={self.cluster},{naming.LABEL_ROLE}="
        return base + "worker", base + "ps"

    def finish(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.error:
            raise self.error[0]
        if self.result.get("outcome") != "succeeded":
            raise AssertionError(f"{self.name}: the operator returned {self.result}")


class TFJob(System):
    """One TFJob, created and then watched until it succeeds (the client's part)."""

    name = "tfjob"

    def __init__(self, api: Any, *args: Any) -> None:
        super().__init__(*args)
        self.api = api
        self.cluster = "imagenet"
        self.done = threading.Event()
        self.final: list[str] = []

    def body(self) -> dict[str, Any]:
        def replicas(n: int) -> dict[str, Any]:
            container = {"name": "tensorflow", "image": IMAGE, "command": ["python", "/opt/train.py"]}
            return {
                "replicas": n,
                "restartPolicy": "Never",
                "template": {"spec": {"containers": [container]}},
            }

        return {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": self.cluster, "namespace": self.ns},
            "spec": {
                "runPolicy": {"cleanPodPolicy": "Running"},
                "successPolicy": "AllWorkers",
                "tfReplicaSpecs": {"PS": replicas(self.a.ps), "Worker": replicas(self.a.workers)},
            },
        }

    def start(self) -> None:
        from kubernetes import client, watch

        objects = client.CustomObjectsApi(self.api)
        created = objects.create_namespaced_custom_object(
            "kubeflow.org", "v1", self.ns, "tfjobs", self.body()
        )

        def wait() -> None:
            rv = created["metadata"]["resourceVersion"]
            while not self.done.is_set():
                stream = watch.Watch().stream(
                    objects.list_namespaced_custom_object,
                    "kubeflow.org",
                    "v1",
                    self.ns,
                    "tfjobs",
                    field_selector=f"metadata.name={self.cluster}",
                    resource_version=rv,
                    timeout_seconds=300,
                )
                for event in stream:
                    obj = event["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    for cond in (obj.get("status") or {}).get("conditions") or []:
                        if cond["type"] in ("Succeeded", "Failed") and cond["status"] == "True":
                            self.final.append(cond["type"])
                            self.done.set()
                    if self.done.is_set():
                        break

        self.thread = threading.Thread(target=wait, daemon=True)
        self.thread.start()

    def selectors(self) -> tuple[str, str]:
        base = f"{TFJOB_LABELS}/job-name={self.cluster},{TFJOB_LABELS}/replica-type="
        return base + "worker", base + "ps"

    def finish(self, timeout: float) -> None:
        if not self.done.wait(timeout) or self.final != ["Succeeded"]:
            raise AssertionError(f"tfjob: ended {self.final or 'not at all'}")


def client_objects(counter: RequestCounter) -> int:
    """Distinct objects the client created or applied (POST, or the provider's
    server-side-apply PATCH), before every pod ran."""
    posts = sum(1 for _, method, _ in counter.log if method == "POST")
    return posts + len({url.split("?", 1)[0] for _, method, url in counter.log if method == "PATCH"})


def measure(
    cp: Any, admin: Any, system: System, counter: RequestCounter, admin_counter: RequestCounter
) -> Result:
    tasks = system.a.workers + system.a.ps
    baseline = count_objects(admin, system.ns)
    res = Result(system.name)
    counter.reset()
    admin_counter.reset()
    served0 = server_requests(admin)
    t0 = time.monotonic()
    system.start()
    res.to_running = time.monotonic() - t0 + wait_pods_running(admin, system.ns, tasks, timeout=900)
    created_until = time.monotonic()
    counts, res.to_settled = settled_objects(admin, system.ns)
    res.to_settled += created_until - t0
    res.objects = {k: n - baseline.get(k, 0) for k, n in counts.items()}
    res.objects = {k: n for k, n in res.objects.items() if n}
    workers_sel, ps_sel = system.selectors()
    results: Any = MP.Queue()
    child = MP.Process(
        target=drive, args=(str(cp.kubeconfig), system.ns, workers_sel, ps_sel, system.a.workers, results)
    )
    child.start()
    done, gone, child_requests = results.get(timeout=1800)
    child.join(60)
    system.finish(timeout=600)
    served = server_requests(admin) - served0
    assert len(done) == system.a.workers, f"{system.name}: saw {len(done)} of {system.a.workers} completions"
    res.ps_gone = gone - max(done.values())
    res.client_requests = counter.count()
    res.client_objects = client_objects(RequestCounter(log=[e for e in counter.log if e[0] < created_until]))
    # The bench's own requests (its lists, the child's patches and polls, the first metric
    # scrape; the second is not in its own figure) are not the systems'.
    res.server_requests = int(served - (admin_counter.count() - 1) - child_requests)
    return res


def table(results: list[Result], base: Result, a: argparse.Namespace) -> str:
    rows = [
        ("objects created by the client", lambda r: r.client_objects, "{:.0f}"),
        ("objects in the namespace, all made", lambda r: r.all_objects, "{:.0f}"),
        ("API requests from the client", lambda r: r.client_requests, "{:.0f}"),
        ("API requests served, all clients", lambda r: r.server_requests, "{:.0f}"),
        ("create -> every pod Running (s)", lambda r: r.to_running, "{:.1f}"),
        ("create -> every object made (s)", lambda r: r.to_settled, "{:.1f}"),
        ("last worker done -> PS gone (s)", lambda r: r.ps_gone, "{:.2f}"),
    ]
    width = max(len(r[0]) for r in rows) + 2
    out = [
        f"{a.workers} workers + {a.ps} PS, kube-apiserver v1.36 + KWOK, one run each; "
        f"ratio = value / {base.system}'s value"
    ]
    out.append(" " * width + "".join(f"{r.system:>22}" for r in results))
    for label, get, fmt in rows:
        cells = []
        for r in results:
            v, b = get(r), get(base)
            ratio = f"{v / b:.2f}x" if b else "-"
            cells.append(f"{fmt.format(v):>12} {ratio:>9}")
        out.append(f"{label:<{width}}" + "".join(cells))
    for r in results:
        out.append(f"  {r.system}: {', '.join(f'{k} {n}' for k, n in sorted(r.objects.items()))}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=600)
    p.add_argument("--ps", type=int, default=8)
    p.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated: jobs,jobset,tfjob")
    p.add_argument("--tfjob-qps", type=int, default=100, help="training-operator --kube-api-qps")
    p.add_argument("--json", action="store_true", help="also print the results as JSON")
    a = p.parse_args(argv)
    chosen = [s for s in a.only.split(",") if s]
    unknown = set(chosen) - set(SYSTEMS)
    if unknown or not chosen:
        p.error(f"--only: unknown {sorted(unknown)}; choose from {', '.join(SYSTEMS)}")
    logging.disable(logging.INFO)

    from k8s import addons
    from kubernetes import client

    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend

    # Build (or find) the controllers before the control plane starts.
    jobset_bin = addons.jobset_binary() if "jobset" in chosen else None
    tfjob_bin = addons.training_operator_binary() if "tfjob" in chosen else None

    counter = install(RequestCounter())
    admin_counter = install(RequestCounter())
    original_api = KubernetesBackend._api.func  # the operator builds its backend in execute

    def counted_api(self: Any) -> Any:
        api = original_api(self)
        counter.watch(api.client)
        return api

    KubernetesBackend._api = property(counted_api)  # type: ignore[assignment]

    results: list[Result] = []
    workdir = Path(tempfile.mkdtemp(prefix="tfk-bench-tfjob-"))
    with control_plane() as cp:
        admin = admin_counter.watch(cp.api_client())
        controllers: list[Any] = []
        try:
            if jobset_bin is not None:
                (workdir / "jobset").mkdir()
                controllers.append(addons.JobSetController(cp, workdir / "jobset", jobset_bin).start(admin))
            if tfjob_bin is not None:
                (workdir / "tfjob").mkdir()
                system_ns = namespace(admin, "kubeflow")
                op = addons.TrainingOperatorController(
                    cp, workdir / "tfjob", tfjob_bin, system_ns, qps=a.tfjob_qps
                )
                controllers.append(op.start(admin))
            # A small unmeasured run first: the provider's first cluster pays for imports
            # and template compilation, which no later one does.
            warm = argparse.Namespace(**{**vars(a), "workers": 1, "ps": 1})
            warm_ns = namespace(admin, "bench-warm-up")
            measure(cp, admin, Provider("jobs", warm_ns, warm, counter), counter, admin_counter)
            for name in chosen:
                ns = namespace(admin, f"bench-{name}")
                print(f"[{name}] running {a.workers} workers + {a.ps} PS ...", file=sys.stderr)
                system: System = (
                    TFJob(counter.watch(cp.api_client()), ns, a, counter)
                    if name == "tfjob"
                    else Provider(name, ns, a, counter)
                )
                results.append(measure(cp, admin, system, counter, admin_counter))
                print(f"[{name}] {results[-1]}", file=sys.stderr)
                client.CoreV1Api(admin).delete_namespace(ns)
                wait_no_pods(admin, ns, timeout=600)
        finally:
            for c in reversed(controllers):
                c.stop(admin)
    shutil.rmtree(workdir, ignore_errors=True)  # the controllers' logs: kept if the bench failed
    base = next((r for r in results if r.system == "jobs"), results[0])
    print(table(results, base, a))
    if a.json:
        print(json.dumps([r.__dict__ for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
