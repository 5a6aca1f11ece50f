"""What waiting costs one triggerer process: N trainings at once, and one training of W workers.

Part 1, per N (default 1, 20, 200 trainings of ``--workers`` workers + 1 PS each, KWOK),
in a fresh process per (N, waiter), on the same Jobs:

- RSS per training: the process's RSS with N waits established (``--settle`` seconds
  after every wait judged its first status), less its RSS before the first (imports
  done), divided by N;
- API requests per minute per training over the next ``--idle`` seconds, in which nothing
  changes (every pod running), counted in the async client (``kubernetes_asyncio``);
- CPU time the process spent in that window, per training (what polling costs the
  triggerer's own loop);
- seconds from the last worker of a training told to exit (its KWOK annotation, set by
  this script) to that training's verdict: the worst and the median.

The waiters: ``tfk`` is ``TFClusterDoneTrigger.run`` (the provider's deferrable wait);
``cncf`` is the cncf provider's ``KubernetesJobTrigger`` (``KubernetesJobOperator``'s
deferrable wait) on each training's worker Job, at its default poll interval.

Part 2 (``--scale 60,2000``): one training of W workers + 16 PS, created, waited on from
its create to its verdict (all workers exit), deleted; the waiting process's peak RSS
growth and the bytes it read from the API server, side by side for each W in one run.
Beside it, a process that only watches the cluster's Jobs (``jobs``): the floor of a
wait that reads Job status and no pod.

Not part of CI: about half an hour of KWOK. Run (the KWOK lock; autogroup: see
helper-common): ``echo 19 > /proc/self/autogroup; flock /tmp/tfk-kwok.lock
.venv/bin/python bench/bench_triggerer.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _k8s_bench as kb
from _common import parser

HERE = Path(__file__).resolve()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Bytes:
    """Bytes of HTTP bodies the process received (aiohttp's stream reader)."""

    total = 0

    @classmethod
    def install(cls) -> None:
        import aiohttp.streams

        original = aiohttp.streams.StreamReader.feed_data

        def feed(self: Any, data: bytes, *args: Any) -> Any:
            cls.total += len(data)
            return original(self, data, *args)

        aiohttp.streams.StreamReader.feed_data = feed  # type: ignore[method-assign,assignment]


# -- the child: N waits in one process ------------------------------------------------------
def _tfk_trigger(job: dict[str, Any]) -> Any:
    from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

    return TFClusterDoneTrigger(**job["trigger"])


def _cncf_trigger(job: dict[str, Any]) -> Any:
    from airflow.providers.cncf.kubernetes.triggers.job import KubernetesJobTrigger

    return KubernetesJobTrigger(
        job_name=f"{job['name']}-worker",
        job_namespace=job["namespace"],
        pod_names=[],
        pod_namespace=job["namespace"],
        base_container_name="tensorflow",
        kubernetes_conn_id=kb.CONN_ID,
        get_logs=False,
    )


class _JobWatch:
    """Not a waiter: one Job watch on the cluster's label selector until its worker Job
    completes, no pod read at all. What a wait from the Jobs' status alone would read;
    part 2 prints it beside the provider's wait as the floor of that design."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job

    async def run(self) -> Any:
        from types import SimpleNamespace

        from airflow_tfk.backends.base import ClusterRef
        from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
        from airflow_tfk.kube.api import BY_KIND

        ref = ClusterRef.from_dict(self.job["trigger"]["cluster"])
        path = BY_KIND["Job"].collection(ref.namespace)
        rv = None
        async with KubernetesBackend(conn_id=kb.CONN_ID)._aapi() as api:
            while True:
                query = {"labelSelector": ref.label_selector, "allowWatchBookmarks": True}
                if rv:
                    query["resourceVersion"] = rv
                async for event in api.watch(path, query, 300):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":  # 410 Gone: from the current state
                        rv = None
                        break
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    conditions = (obj.get("status") or {}).get("conditions") or []
                    if obj.get("metadata", {}).get("name", "").endswith("-worker") and any(
                        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                        for c in conditions
                    ):
                        yield SimpleNamespace(payload={"status": "success"})
                        return


def _note_first_status(seen: dict[str, float]) -> None:
    """Note when each wait judged its first status (``seen``, by cluster name): the idle
    window must start once every wait is established, not at a fixed time (200 waits take
    tens of seconds to start on a busy machine, and would be measured while starting)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    from airflow_tfk.run.wait import Wait

    check = Wait.check

    async def checked(self: Wait, watcher: Any, status: Any) -> Any:
        seen.setdefault(self.ref.name, time.monotonic())
        return await check(self, watcher, status)

    get_job_status = AsyncKubernetesHook.get_job_status

    async def got(self: Any, name: str, namespace: str) -> Any:
        job = await get_job_status(self, name=name, namespace=namespace)
        seen.setdefault(name.removesuffix("-worker"), time.monotonic())
        return job

    Wait.check = checked  # type: ignore[method-assign]
    AsyncKubernetesHook.get_job_status = got  # type: ignore[method-assign]


async def _child(args: dict[str, Any]) -> dict[str, Any]:
    import logging

    logging.disable(logging.INFO)  # a line per poll is not what is measured
    make = {"tfk": _tfk_trigger, "cncf": _cncf_trigger, "jobs": _JobWatch}[args["waiter"]]
    counter = kb.install_async(kb.RequestCounter())
    _Bytes.install()
    seen: dict[str, float] = {}
    _note_first_status(seen)
    base = rss_mb()
    verdicts: dict[str, float] = {}

    failures: list[str] = []

    async def one(job: dict[str, Any]) -> None:
        try:
            async for event in make(job).run():
                if event.payload["status"] != "success":
                    failures.append(str(event.payload.get("message")))
                verdicts[job["name"]] = time.time()
                return
        except Exception as exc:  # counted and reported, not the end of the measurement
            failures.append(f"{type(exc).__name__}: {exc}")

    started = time.monotonic()
    tasks = [asyncio.create_task(one(job)) for job in args["jobs"]]
    if args.get("all_established"):
        while len(seen) < len(tasks) and time.monotonic() - started < args["verdict_timeout"]:
            await asyncio.sleep(0.5)
    established_after = time.monotonic() - started
    await asyncio.sleep(args["settle"])
    established = rss_mb()
    t0, bytes0, cpu0 = time.monotonic(), _Bytes.total, cpu_seconds()
    await asyncio.sleep(args["idle"])
    idle_cpu = cpu_seconds() - cpu0
    idle_requests = counter.count(since=t0)
    summary = counter.summary(since=t0)
    idle_bytes = _Bytes.total - bytes0
    print("@@idle-done", flush=True)
    # A wait that never ends must not hold the whole run: what did not end is reported.
    _, pending = await asyncio.wait(tasks, timeout=args["verdict_timeout"])
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return {
        "rss_base_mb": base,
        "rss_established_mb": established,
        "established_after": established_after,
        "established": len(seen),
        "idle_requests": idle_requests,
        "idle_summary": summary,
        "idle_bytes": idle_bytes,
        "idle_cpu": idle_cpu,
        "verdicts": verdicts,
        "failures": failures,
        "missing": len(pending),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bytes_read": _Bytes.total,
    }


def child_main(path: str) -> None:
    """Load the waiters' modules, say ``ready``, and start waiting when the parent says
    so (a line on stdin): part 2's wait then starts at the create, not a process start
    (seconds of imports on a busy machine) after it."""
    import airflow.providers.cncf.kubernetes.triggers.job  # noqa: F401 - both waiters' imports

    import airflow_tfk.backends.kubernetes.backend
    import airflow_tfk.triggers.cluster  # noqa: F401

    print("@@ready", flush=True)
    sys.stdin.readline()
    args = json.loads(Path(path).read_text())
    print("@@" + json.dumps(asyncio.run(_child(args))), flush=True)


# -- the parent -----------------------------------------------------------------------------
def create_trainings(ns: str, count: int, workers: int, ps: int) -> list[dict[str, Any]]:
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
    from airflow_tfk.spec.cluster import TFClusterSpec
    from airflow_tfk.triggers.cluster import TFClusterDoneTrigger

    backend = KubernetesBackend(conn_id=kb.CONN_ID)
    jobs = []
    for i in range(count):
        spec = TFClusterSpec.from_dict(
            {**kb.cluster_spec(ns, workers, ps), "name": f"t{i}-{uuid.uuid4().hex[:4]}"}
        )
        ref = backend.create(spec)
        trigger = TFClusterDoneTrigger(
            cluster=ref.to_dict(),
            backend_kind="kubernetes",
            backend_config={"conn_id": kb.CONN_ID},
            mode="between_graph",
            replicas={"worker": workers, "ps": ps},
            progress_interval=30.0,
        )
        jobs.append({"name": ref.name, "namespace": ns, "trigger": trigger.serialize()[1]})
    return jobs


def finish_workers(api: Any, ns: str) -> dict[str, float]:
    """Tell every worker pod of the namespace to exit 0 now; per cluster, the time its
    last worker was told (600 patches take seconds: one time for all would credit the
    first clusters with the others' patching).
    A patch that fails (a loaded API server) is tried again: a worker left running would
    read as a late verdict."""
    from kubernetes import client

    from airflow_tfk.core import naming

    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(ns, label_selector=f"{naming.LABEL_ROLE}=worker").items
    pods.sort(key=lambda p: p.metadata.labels[naming.LABEL_CLUSTER])
    body = {"metadata": {"annotations": {kb.harness.EXIT_CODE: "0"}}}
    told: dict[str, float] = {}
    for p in pods:
        for attempt in range(5):
            try:
                core.patch_namespaced_pod(p.metadata.name, ns, body)
                break
            except Exception:
                if attempt == 4:
                    raise
                time.sleep(1 + attempt)
        told[p.metadata.labels[naming.LABEL_CLUSTER]] = time.time()
    return told


def wait_tasks_running(api: Any, ns: str, count: int, timeout: float = 900) -> float:
    """Seconds until ``count`` pods of the namespace's Jobs are ready, from the Jobs'
    status: a few objects per poll, where a pod list would read every pod each second and
    load the API server the waiters are measured against."""
    from kubernetes import client

    batch = client.BatchV1Api(api)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        jobs = batch.list_namespaced_job(ns).items
        if sum((j.status.ready or 0) for j in jobs) >= count:
            return time.monotonic() - t0
        time.sleep(1)
    raise TimeoutError(f"fewer than {count} ready pods in {ns} after {timeout}s")


class Child:
    """One waiting process: its protocol lines on stdout, its stderr kept in a file so a
    process that dies can say why."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.path = workdir / f"child-{name}.json"
        self.name = name
        self.err_path = workdir / f"child-{name}.err"
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), "--child", str(self.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err_path.open("w"),
            text=True,
        )
        self.dead: str | None = None
        self._ready = False

    def ready(self) -> bool:
        """Whether the process has loaded its modules (False: it died first)."""
        if not self._ready:
            self._ready = self.said() == "ready"
        return self._ready

    def start(self, args: dict[str, Any]) -> bool:
        """Once the process is ready: wait on ``args["jobs"]``. False if it died first."""
        if not self.ready():
            return False
        assert self.proc.stdin is not None
        self.path.write_text(json.dumps(args))
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        return True

    def said(self) -> str | None:
        """The next protocol line (``@@``...), or None once the process has died (why: ``dead``)."""
        if self.dead is None:
            try:
                return _said(self.proc)
            except RuntimeError as exc:
                tail = self.err_path.read_text(errors="replace").strip().splitlines()[-5:]
                self.dead = f"{exc}: {' | '.join(tail) or 'no output'}"
                print(f"{self.name}: {self.dead}", flush=True)
        return None


def _said(proc: subprocess.Popen[str]) -> str:
    """The child's next protocol line (``@@``...); its log lines pass through."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("@@"):
            return line[2:].strip()
    raise RuntimeError(f"the waiting process ended early (exit {proc.wait()})")


WAITERS = ("tfk", "cncf")


def part1(cp: Any, api: Any, sizes: list[int], opts: Any, workdir: Path) -> None:
    """Every size at once on one control plane, each waited on by both waiters in
    processes of their own: one idle window for all (what the waiters cost while nothing
    changes does not depend on what the others do), then each size's workers exit in turn."""
    from kubernetes import client

    trainings = {}
    for n in sizes:
        ns = kb.namespace(api, f"trig-{n}")
        trainings[n] = (ns, create_trainings(ns, n, opts.workers, 1))
        print(f"N={n}: {n} trainings created", flush=True)
    for n, (ns, _) in trainings.items():
        took = wait_tasks_running(api, ns, n * (opts.workers + 1))
        print(f"N={n}: every pod ready after {took:.0f} s more", flush=True)
    children: dict[tuple[int, str], Child] = {}
    for n, (_ns, jobs) in trainings.items():
        for waiter in WAITERS:
            args = {
                "jobs": jobs,
                "settle": opts.settle,
                "all_established": True,
                "idle": opts.idle,
                "waiter": waiter,
                "verdict_timeout": opts.verdict_timeout,
            }
            children[n, waiter] = Child(workdir, f"{n}-{waiter}")
            children[n, waiter].start(args)
    for child in children.values():
        if child.said() not in ("idle-done", None):
            raise RuntimeError(f"{child.name}: unexpected protocol line")
    rows: list[tuple[int, str, tuple[float, ...] | None, str]] = []
    for n, (ns, _) in trainings.items():
        told = finish_workers(api, ns)
        for waiter in WAITERS:
            child = children[n, waiter]
            said = child.said()
            if said is None:  # a waiter that died is a figure too
                rows.append((n, waiter, None, f"died: {child.dead}"))
                continue
            out = json.loads(said)
            child.proc.wait()
            late = sorted(t - told[name] for name, t in out["verdicts"].items()) or [float("nan")]
            per = (out["rss_established_mb"] - out["rss_base_mb"]) / n
            rate = out["idle_requests"] / n * 60 / opts.idle
            cpu = out["idle_cpu"] * 1000 / n * 60 / opts.idle
            figures = (per, rate, cpu, late[-1], statistics.median(late), len(out["verdicts"]))
            note = f"{len(out['failures'])} failed, {out['missing']} unanswered"
            note += f"; established in {out['established_after']:.0f} s"
            rows.append((n, waiter, figures, note))
            print(
                f"N={n} {waiter}: RSS/training {per:.3f} MB, {rate:.2f} req/min/training,"
                f" CPU {cpu:.1f} ms/min/training,"
                f" verdict max {late[-1]:.2f} s median {statistics.median(late):.2f} s,"
                f" {len(out['verdicts'])}/{n} verdicts; idle requests {out['idle_summary']},"
                f" idle bytes {out['idle_bytes']}; RSS {out['rss_base_mb']:.0f} ->"
                f" {out['rss_established_mb']:.0f} MB; {out['established']}/{n} established after"
                f" {out['established_after']:.0f} s;"
                f" {len(out['failures'])} waits failed {out['failures'][:3]}",
                flush=True,
            )
        client.CoreV1Api(api).delete_namespace(ns)
    print(
        f"\nN      waiter  RSS/training MB  req/min/training  CPU ms/min/training  verdict max s  median s"
        f"  verdicts"
        f"   ({opts.idle:.0f} s idle window from {opts.settle:.0f} s after every wait's first status;"
        f" {opts.workers} workers + 1 PS each)"
    )
    for n, waiter, fig, note in rows:
        if fig is None:
            print(f"{n:<6d} {waiter:<7s} {note}")
            continue
        per, rate, cpu, worst, median, got = fig
        print(
            f"{n:<6d} {waiter:<7s} {per:15.3f} {rate:17.2f} {cpu:19.1f} {worst:14.2f} {median:9.2f}"
            f" {got:5d}/{n:<5d} {note}"
        )
    sys.stdout.flush()


SCALE_WAITERS = ("tfk", "jobs")


def part2(cp: Any, api: Any, widths: list[int], opts: Any, workdir: Path) -> None:
    """Per width: create (the provider's create), wait (from the create to the verdict, in
    a process of its own; beside it, as a floor, a process that only watches the Jobs),
    delete (the provider's delete, until no pod is left)."""
    from kubernetes import client

    from airflow_tfk.backends.base import ClusterRef
    from airflow_tfk.backends.kubernetes.backend import KubernetesBackend

    backend = KubernetesBackend(conn_id=kb.CONN_ID)
    rows: list[tuple[int, str, tuple[float, ...] | None, str]] = []
    for w in widths:
        ns = kb.namespace(api, f"scale-{w}")
        children = {waiter: Child(workdir, f"scale-{w}-{waiter}") for waiter in SCALE_WAITERS}
        for child in children.values():
            child.ready()
        t0 = time.monotonic()
        jobs = create_trainings(ns, 1, w, 16)
        created = time.monotonic() - t0
        # The waits start at the create: they see every pod come up.
        args = {"jobs": jobs, "settle": 0.1, "idle": 0.1, "verdict_timeout": opts.verdict_timeout}
        for waiter, child in children.items():
            if child.start(args | {"waiter": waiter}):
                child.said()  # idle-done
        running = wait_tasks_running(api, ns, w + 16)
        time.sleep(5)
        told = finish_workers(api, ns)
        outs = {waiter: child.said() for waiter, child in children.items()}
        t1 = time.monotonic()
        backend.delete(ClusterRef.from_dict(jobs[0]["trigger"]["cluster"]), "benchmark done")
        kb.wait_no_pods(api, ns, timeout=600)
        deleted = time.monotonic() - t1
        for waiter, said in outs.items():
            if said is None:
                rows.append((w, waiter, None, f"died: {children[waiter].dead}"))
                continue
            out = json.loads(said)
            children[waiter].proc.wait()
            verdict = max((t - told[name] for name, t in out["verdicts"].items()), default=float("nan"))
            growth = out["peak_rss_mb"] - out["rss_base_mb"]
            fig: tuple[float, ...] = (growth, out["bytes_read"] / 2**20, created, running, verdict, deleted)
            note = f"{len(out['failures'])} failed {out['failures'][:2]}, {out['missing']} unanswered"
            rows.append((w, waiter, fig, note))
            print(
                f"W={w} {waiter}: peak RSS growth {growth:.1f} MB, read {fig[1]:.1f} MB,"
                f" create {created:.1f} s, all ready {running:.0f} s later, verdict {verdict:.2f} s"
                f" after the last worker, delete {deleted:.1f} s; {note}",
                flush=True,
            )
        client.CoreV1Api(api).delete_namespace(ns)
    print(
        "\nworkers  +PS  waiter  peak RSS growth MB  bytes read MB  create s  all ready s"
        "  verdict after last exit s  delete s"
    )
    for w, waiter, row, note in rows:
        if row is None:
            print(f"{w:7d} {16:4d}  {waiter:<6s}  {note}")
            continue
        growth, read, created, running, verdict, deleted = row
        print(
            f"{w:7d} {16:4d}  {waiter:<6s} {growth:19.1f} {read:14.1f} {created:9.1f} {running:12.0f}"
            f" {verdict:26.2f} {deleted:9.1f}   {note}"
        )
    print("(jobs: a Job watch alone, no pod read: not a waiter, the floor of a wait on Job status)")
    sys.stdout.flush()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child_main(sys.argv[2])
        return
    p = parser(
        __doc__,
        sizes="1,20,200",
        workers=2,
        idle=300.0,
        settle=45.0,
        scale="60,2000",
        nodes=8,
        verdict_timeout=900.0,
    )
    opts = p.parse_args()
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="tfk-bench-trig-"))
    with kb.control_plane(nodes=opts.nodes) as cp:
        api = cp.api_client()
        # The widths first: part 1's figures then come from a control plane that has
        # finished with 2,000 pods, rather than part 2's from one still removing part 1's.
        widths = [int(x) for x in opts.scale.split(",") if x]
        if widths:
            part2(cp, api, widths, opts, workdir)
        sizes = [int(x) for x in opts.sizes.split(",") if x]
        if sizes:
            part1(cp, api, sizes, opts, workdir)


if __name__ == "__main__":
    main()
