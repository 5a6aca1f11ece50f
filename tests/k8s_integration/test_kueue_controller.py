"""``queue_name`` with the real Kueue controller (sigs.k8s.io/kueue v0.19.2, built from its Go
module by tests/k8s/kueue/build.sh, webhooks included) and the real JobSet controller, on
the KWOK control plane. Each test gets its own quota: a ClusterQueue that only admits from
the test's namespace, with a LocalQueue ``lq`` there.

- quota for one cluster: a second cluster queues (its Jobs stay suspended, the task log
  carries Kueue's pending reason) and is admitted, by Kueue, only when the first finishes;
- a cluster bigger than the quota never starts a single pod, although part of it would fit;
- kill-safety of a queued cluster: ``on_kill`` and a deferred ``execution_timeout`` while
  Kueue holds it leave nothing, Workload included;
- ``layout: jobset`` is admitted as ONE Workload with a pod set per role;
- the ``jobs`` layout with a PS: the PS Job is a Workload like the workers' Job (Kueue's
  batch/job integration only), admitted, and the training succeeds.

KWOK pods run no containers: the tests finish them through the stage annotations
(``_tfk.finish`` / ``_tfk.PodDriver``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sqlite3
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import optuna
import pytest
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferred
from k8s import harness
from kubernetes import client

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core import naming
from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.protocol.progress import event_line
from airflow_tfk.run.policies import Outcome
from airflow_tfk.run.wait import wait_for_cluster
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.runner import SweepStopped
from airflow_tfk.sweep.trials import ENV_PARAMS, base_name
from k8s_integration import _kueue, _tfk

pytestmark = [pytest.mark.k8s, pytest.mark.addons("jobset", "kueue")]
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures
controllers, quota = _kueue.controllers, _kueue.quota  # fixtures
IDENTITY = RunIdentity("k8s_it", "train", "scheduled__2026-01-01T00:00:00+00:00", -1)


def _spec(ns: str, mode: str, workers: int, ps: int = 0, **extra: Any) -> dict[str, Any]:
    """A spec whose every task asks for 1 CPU (what the quotas count)."""
    data = _tfk.spec(ns, mode, workers=workers, ps=ps, **extra)
    for role in ("worker", "ps"):
        if role in data:
            data[role]["resources"] = {"cpu": "1"}
    return data


def _queued_jobset(
    conn_id: str, ns: str, name: str, workers: int, queue: str
) -> tuple[KubernetesBackend, TFClusterSpec, ClusterRef]:
    """Create a between_graph JobSet of ``workers`` + 1 PS, 1 CPU each, in LocalQueue ``queue``."""
    backend = KubernetesBackend(conn_id=conn_id)
    data = _spec(ns, "between_graph", workers=workers, ps=1, name=name, layout="jobset", queue_name=queue)
    spec = TFClusterSpec.from_dict(data)
    return backend, spec, backend.create(spec, IDENTITY)


def test_a_second_cluster_queues_until_the_first_finishes(
    k8s_api, controllers, quota, tfk_ns, tfk_conn, capfd
):
    """Quota for one cluster (2 CPU); two all_reduce clusters of 2 x 1 CPU, Jobs layout."""
    lq = quota("2")
    backend = KubernetesBackend(conn_id=tfk_conn)
    first = TFClusterSpec.from_dict(_spec(tfk_ns, "all_reduce", workers=2, ps=0, name="first", queue_name=lq))
    first_ref = backend.create(first, IDENTITY)
    _tfk.wait_for(
        "the first cluster's 2 pods", lambda: len(_tfk.pods(k8s_api, tfk_ns, "first")) == 2, timeout=60
    )
    assert all(_kueue.true(w, "Admitted") for w in _kueue.owned(k8s_api, tfk_ns, "Job", "first-worker"))

    ctx = _tfk.task_context("manual__second")
    second = _tfk.cluster_name(ctx)
    spec = _spec(tfk_ns, "all_reduce", workers=2, ps=0, queue_name=lq)
    with _tfk.PodDriver(k8s_api, tfk_ns, second):
        run = _kueue.OperatorThread(_tfk.make_op(tfk_ns, spec, progress_interval=1), ctx)
        reason = _tfk.wait_for(
            "Kueue's pending reason on the second cluster",
            lambda: _kueue.pending_reason(k8s_api, tfk_ns, "Job", f"{second}-worker"),
            timeout=60,
        )
        assert f"insufficient unused quota for cpu in flavor {controllers}, 2 more needed" in reason, reason
        log: list[str] = []
        line = f"queued: Job {second}-worker queued in LocalQueue {lq}: {reason}"
        try:
            _tfk.wait_for(
                "the reason in the task log",
                lambda: log.append(capfd.readouterr().out) or line in "".join(log),
                timeout=30,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nwanted: {line}\nlog:\n{''.join(log)[-4000:]}") from None
        job = client.BatchV1Api(k8s_api).read_namespaced_job(f"{second}-worker", tfk_ns)
        assert job.spec.suspend is True and not _tfk.pods(k8s_api, tfk_ns, second)

        _tfk.finish(k8s_api, tfk_ns, "first", "worker", 0, count=2)
        verdict = wait_for_cluster(
            backend, first_ref, first.mode, {"worker": 2}, timeout=60, progress_interval=3600
        )
        assert verdict.outcome is Outcome.SUCCEEDED, verdict
        run.join()
    assert run.error is None and run.result["outcome"] == "succeeded", (run.error, run.result)
    done = client.BatchV1Api(k8s_api).read_namespaced_job("first-worker", tfk_ns).status.completion_time
    started = min(p.metadata.creation_timestamp for p in _tfk.pods(k8s_api, tfk_ns, second))
    assert started >= done, (started, done)  # admitted only once the first released its quota
    backend.delete(first_ref)
    backend.delete(ClusterRef(second, tfk_ns))  # the operator's default clean-up keeps finished Jobs
    _kueue.gone(k8s_api, tfk_ns, "first")
    _kueue.gone(k8s_api, tfk_ns, second)


def test_a_cluster_bigger_than_the_quota_never_starts_a_pod(k8s_api, controllers, quota, tfk_ns, tfk_conn):
    """4 CPU asked, 3 in the quota: 3 of the 4 tasks would fit, none may start."""
    lq = quota("3")
    backend, spec, ref = _queued_jobset(tfk_conn, tfk_ns, "big", 3, lq)
    reason = _tfk.wait_for(
        "Kueue's pending reason", lambda: _kueue.pending_reason(k8s_api, tfk_ns, "JobSet", "big"), timeout=60
    )
    # Kueue's own words (v0.19: the PS's 1 CPU, then the workers' 3, against the 3 of the quota).
    assert f"insufficient quota for cpu in flavor {controllers}, " in reason, reason
    assert "requests (1) + current podset request (3) > maximum capacity (3)" in reason, reason
    lines: list[str] = []
    verdict = wait_for_cluster(
        backend, ref, spec.mode, {"ps": 1, "worker": 3}, timeout=4, progress_interval=1, emit=lines.append
    )
    assert verdict.outcome is Outcome.RUNNING  # still waiting
    assert f"queued: JobSet big queued in LocalQueue {lq}: {reason}" in lines, lines
    assert _tfk.pods(k8s_api, tfk_ns, "big") == []
    js = _tfk.objects(k8s_api, tfk_ns, "big", kinds=[_kueue.JOBSETS])["jobsets/big"]
    assert js["spec"]["suspend"] is True
    backend.delete(ref)
    _kueue.gone(k8s_api, tfk_ns, "big")


def test_a_queued_cluster_killed_or_timed_out_leaves_nothing(k8s_api, quota, tfk_ns, tfk_conn):
    """on_kill of the blocking operator, and the deferred execution_timeout, while Kueue
    holds the cluster (1 CPU of quota, 2 asked)."""
    lq = quota("1")
    spec = _spec(tfk_ns, "all_reduce", workers=2, ps=0, queue_name=lq)

    ctx = _tfk.task_context("manual__killqueued")
    name = _tfk.cluster_name(ctx)
    run = _kueue.OperatorThread(
        _tfk.make_op(tfk_ns, spec, progress_interval=2), ctx
    )  # a queued wait re-looks every 2 s
    _tfk.wait_for(
        "the cluster queued",
        lambda: _kueue.pending_reason(k8s_api, tfk_ns, "Job", f"{name}-worker"),
        timeout=60,
    )
    run.op.on_kill()
    run.join(60)
    assert isinstance(run.error, TrainingFailed), run.error
    _kueue.gone(k8s_api, tfk_ns, name)

    ctx = _tfk.task_context("manual__timeoutqueued")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, spec, deferrable=True, execution_timeout=timedelta(seconds=4))
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    _tfk.wait_for(
        "the cluster queued",
        lambda: _kueue.pending_reason(k8s_api, tfk_ns, "Job", f"{name}-worker"),
        timeout=60,
    )
    trigger = type(deferred.value.trigger)(
        **deferred.value.trigger.serialize()[1]
    )  # as the triggerer builds it

    async def first_event() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    event = asyncio.run(first_event())
    assert event["status"] == "timeout", event
    with pytest.raises(AirflowTaskTimeout):
        op.execute_complete(ctx, event, **deferred.value.kwargs)
    assert not _tfk.pods(k8s_api, tfk_ns, name)
    _kueue.gone(k8s_api, tfk_ns, name)


def test_the_jobset_layout_is_admitted_as_one_workload(k8s_api, quota, tfk_ns, tfk_conn):
    """between_graph, 2 workers + 1 PS of 1 CPU with 3 CPU of quota: one Workload, owned
    by the JobSet, a pod set per role; admitted whole, it runs and succeeds."""
    lq = quota("3")
    backend, spec, ref = _queued_jobset(tfk_conn, tfk_ns, "whole", 2, lq)
    _tfk.wait_for("3 pods", lambda: len(_tfk.pods(k8s_api, tfk_ns, "whole")) == 3, timeout=60)
    workloads = _kueue.workloads(k8s_api, tfk_ns)
    assert len(workloads) == 1, [w["metadata"]["name"] for w in workloads]
    (wl,) = workloads
    assert [(o["kind"], o["name"]) for o in wl["metadata"]["ownerReferences"]] == [("JobSet", "whole")]
    assert {p["name"]: p["count"] for p in wl["spec"]["podSets"]} == {"ps": 1, "worker": 2}
    assert _kueue.true(wl, "Admitted"), wl["status"]
    usage = {a["name"]: a["resourceUsage"]["cpu"] for a in wl["status"]["admission"]["podSetAssignments"]}
    assert usage == {"ps": "1", "worker": "2"}, usage
    _tfk.finish(k8s_api, tfk_ns, "whole", "worker", 0, count=2)
    verdict = wait_for_cluster(
        backend, ref, spec.mode, {"ps": 1, "worker": 2}, timeout=60, progress_interval=3600
    )
    assert verdict.outcome is Outcome.SUCCEEDED, verdict
    _tfk.wait_for(
        "Kueue to mark the Workload finished",
        lambda: _kueue.true(_kueue.owned(k8s_api, tfk_ns, "JobSet", "whole")[0], "Finished"),
        timeout=60,
    )
    backend.delete(ref)
    _kueue.gone(k8s_api, tfk_ns, "whole")


def test_the_jobs_layout_with_a_ps_needs_only_the_job_integration(k8s_api, quota, tfk_ns, tfk_conn, capfd):
    """between_graph in the ``jobs`` layout, 2 workers + 1 PS of 1 CPU, 3 CPU of quota:
    the PS is a Job, so Kueue's batch/job integration queues it like the workers, with no
    pod or statefulset integration. Each Job is one
    Workload; both are admitted, the training succeeds, and the PS Job is cleaned up."""
    lq = quota("3")
    ctx = _tfk.task_context("manual__jobsps")
    name = _tfk.cluster_name(ctx)
    spec = _spec(tfk_ns, "between_graph", workers=2, ps=1, queue_name=lq)
    with _tfk.PodDriver(k8s_api, tfk_ns, name):
        run = _kueue.OperatorThread(_tfk.make_op(tfk_ns, spec), ctx)
        _tfk.wait_for("3 pods", lambda: len(_tfk.pods(k8s_api, tfk_ns, name)) == 3, timeout=60)
        usage = {}
        for role in ("ps", "worker"):
            (wl,) = _kueue.owned(k8s_api, tfk_ns, "Job", f"{name}-{role}")
            assert _kueue.true(wl, "Admitted"), wl["status"]
            (assignment,) = wl["status"]["admission"]["podSetAssignments"]
            usage[role] = assignment["resourceUsage"]["cpu"]
        assert usage == {"ps": "1", "worker": "2"}, usage
        run.join()
    assert run.error is None and run.result["outcome"] == "succeeded", (run.error, run.result)
    assert f"deleted ps of cluster {name}" in capfd.readouterr().out
    _tfk.wait_for("the PS pod gone", lambda: not _tfk.pods(k8s_api, tfk_ns, name, "ps"), timeout=60)
    _tfk.wait_for(
        "the PS Job's Workload gone",
        lambda: not _kueue.owned(k8s_api, tfk_ns, "Job", f"{name}-ps"),
        timeout=60,
    )
    KubernetesBackend(conn_id=tfk_conn).delete(ClusterRef(name, tfk_ns))
    _kueue.gone(k8s_api, tfk_ns, name)


# -- a sweep under a queue ------------------------------------------------------------------
# The must-show is 20 trials (TFK_KWOK_SWEEP_TRIALS=20: ~40 s at load 16 on 2
# cores); CI runs 10, as the sweep loop's own creates and deletes take ~1 s a trial there.
SWEEP_TRIALS = int(os.environ.get("TFK_KWOK_SWEEP_TRIALS", "10"))
SWEEP_QUOTA = 4  # trials of 1 CPU that Kueue admits at once
SWEEP_CLUSTERS = 6  # max_concurrent_trials: trial clusters the task keeps, queued or not
KILL_AFTER = SWEEP_TRIALS * 2 // 5  # trials completed when the sweep task is killed


def _trial_loss(params: dict[str, float]) -> float:
    """What a trial 'trains' to: best at lr = 1e-2."""
    return round((math.log10(params["lr"]) + 2) ** 2, 6)


def _trial_logs(k8s_api):
    """``KubernetesBackend.logs`` for KWOK, whose nodes have no kubelet to serve container
    logs: the lines the trial's worker would print (its metrics event with the loss of its
    parameters), read from the environment of the trial's real Job."""

    def logs(self, ref: ClusterRef, role: str, index: int, tail_lines: int | None = None) -> str:
        job = client.BatchV1Api(k8s_api).read_namespaced_job(f"{ref.name}-{role}", ref.namespace)
        env = {e.name: e.value for e in job.spec.template.spec.containers[0].env or []}
        params = json.loads(env[ENV_PARAMS])
        return event_line("metrics", loss=_trial_loss(params)) + "\n"

    return logs


def _sweep_op(ns: str, lq: str, storage: Path) -> Any:
    from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator

    spec = _spec(ns, "all_reduce", workers=1, ps=0, queue_name=lq)
    return TFHyperparameterSweepOperator(
        task_id="sweep",
        backend="kubernetes",
        kubernetes_conn_id=_tfk.CONN_ID,
        cluster_spec=spec,
        sweep={
            "n_trials": SWEEP_TRIALS,
            "max_concurrent_trials": SWEEP_CLUSTERS,
            "search_space": {"lr": {"type": "float", "low": 1e-4, "high": 1.0, "log": True}},
            "sampler": {"name": "random", "seed": 3},
            # KWOK gives no progress lines, so there is nothing to prune on; the
            # pruner's own test runs real trainings on the local backend.
            "pruner": "none",
            "storage": str(storage),
            "poll_interval": 0.25,
        },
    )


def _worker_runs_3s(pod: client.V1Pod) -> dict[str, str] | None:
    if (pod.metadata.labels or {}).get(naming.LABEL_ROLE) != "worker":
        return None
    return {harness.EXIT_CODE: "0", harness.EXIT_DELAY: "3s"}


def test_a_sweep_stays_within_the_queue_and_a_killed_sweep_resumes(
    k8s_api, quota, tfk_ns, tfk_conn, tmp_path, monkeypatch
):
    """``SWEEP_TRIALS`` trials of one 1-CPU worker each; Kueue's quota admits 4 at once,
    the sweep keeps at most 6 trial clusters (so 2 wait in the queue). Sampled all along,
    both tries: never more than 4 admitted Workloads or running pods, never more than 6
    trial clusters. ``on_kill`` mid-sweep leaves 0 pods, Jobs and Workloads; the retry (the
    same task instance, try 2) runs the interrupted trials again and the ones never
    started, and no finished one."""
    lq = quota(str(SWEEP_QUOTA))
    monkeypatch.setattr(KubernetesBackend, "logs", _trial_logs(k8s_api))
    storage = tmp_path / "study.db"
    monkeypatch.setenv("AIRFLOW__TFK__SWEEP_ROOT", str(tmp_path))  # the platform's sweep root
    url = f"sqlite:///{storage}"
    ctx = _tfk.task_context("manual__sweep", task_id="sweep")
    base = base_name(RunIdentity("k8s_it", "sweep", "manual__sweep", -1))
    batch = client.BatchV1Api(k8s_api)

    def completed() -> int:
        # Read-only SQL: optuna.load_study could race the sweep's own creation of the schema.
        try:
            with contextlib.closing(sqlite3.connect(f"file:{storage}?mode=ro", uri=True)) as db:
                return int(db.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0])
        except sqlite3.Error:
            return 0

    def no_pods_jobs_workloads() -> bool:
        return not (
            client.CoreV1Api(k8s_api).list_namespaced_pod(tfk_ns).items
            or batch.list_namespaced_job(tfk_ns).items
            or _kueue.workloads(k8s_api, tfk_ns)
        )

    t0 = time.monotonic()
    with (
        _tfk.PodDriver(k8s_api, tfk_ns, rule=_worker_runs_3s),
        _kueue.ConcurrencySampler(k8s_api, tfk_ns) as first,
    ):
        run = _kueue.OperatorThread(_sweep_op(tfk_ns, lq, storage), ctx)

        def midway() -> bool:
            assert run.thread.is_alive(), f"the sweep ended before the kill: {run.error or run.result}"
            return completed() >= KILL_AFTER and first.peak_clusters == SWEEP_CLUSTERS

        _tfk.wait_for("trials finished and a full set of trial clusters", midway, timeout=120, every=0.5)
        run.op.on_kill()
        run.join(60)
        _tfk.wait_for("0 pods, 0 Jobs, 0 Workloads", no_pods_jobs_workloads, timeout=60)
    assert isinstance(run.error, SweepStopped), run.error
    killed_after = time.monotonic() - t0

    study = optuna.load_study(study_name=None, storage=url)
    before = {t.number: t for t in study.trials}
    done_before = {n for n, t in before.items() if studies.counted(t)}
    interrupted = {n for n, t in before.items() if t.user_attrs.get(studies.INTERRUPTED)}
    assert len(done_before) >= KILL_AFTER and interrupted, (done_before, interrupted)
    assert all(before[n].state.name == "COMPLETE" for n in done_before)

    ctx = _tfk.task_context("manual__sweep", task_id="sweep", try_number=2)
    with (
        _tfk.PodDriver(k8s_api, tfk_ns, rule=_worker_runs_3s),
        _kueue.ConcurrencySampler(k8s_api, tfk_ns) as retry,
    ):
        result = _sweep_op(tfk_ns, lq, storage).execute(ctx)
        _tfk.wait_for("0 pods, 0 Jobs, 0 Workloads", no_pods_jobs_workloads, timeout=60)
    total = time.monotonic() - t0
    for sampler in (first, retry):
        assert not sampler.errors, sampler.errors
        assert sampler.samples > 10, sampler.samples
        assert sampler.peak_admitted <= SWEEP_QUOTA and sampler.peak_pods <= SWEEP_QUOTA, vars(sampler)
        assert sampler.peak_clusters <= SWEEP_CLUSTERS, vars(sampler)
    # The quota was the limit: full at some point, with trials waiting for it.
    assert max(first.peak_admitted, retry.peak_admitted) == SWEEP_QUOTA, (vars(first), vars(retry))
    assert max(first.peak_pending, retry.peak_pending) >= 1, (vars(first), vars(retry))

    rows = {r["number"]: r for r in result["trials"]}
    assert sum(r["state"] == "COMPLETE" for r in rows.values()) == SWEEP_TRIALS, rows
    after = {t.number: t for t in optuna.load_study(study_name=None, storage=url).trials}
    for n in done_before:  # not run again: the same trial, and no cluster of it in try 2
        assert after[n].datetime_start == before[n].datetime_start
        assert f"{base}-t{n}" not in retry.seen, (n, list(retry.seen))
    reruns = {t.user_attrs[studies.RERUN_OF]: t for t in after.values() if studies.RERUN_OF in t.user_attrs}
    assert set(reruns) == interrupted
    assert all(t.params == before[n].params for n, t in reruns.items())
    # try 2 started exactly the trials that were not finished before it, a cluster each
    # (the kill queued the interrupted trials' parameters as new, waiting trials already)
    started = {n for n in after if n not in before or before[n].state.name == "WAITING"}
    assert len(started) == SWEEP_TRIALS - len(done_before), sorted(started)
    assert set(retry.seen) <= {f"{base}-t{n}" for n in started}, list(retry.seen)
    for r in rows.values():
        if r["state"] == "COMPLETE":
            assert r["value"] == _trial_loss(r["params"]), r
    best = min((r for r in rows.values() if r["state"] == "COMPLETE"), key=lambda r: r["value"])
    assert result["best"]["number"] == best["number"]
    print(
        f"sweep under Kueue: killed after {killed_after:.1f} s with {len(done_before)} finished, "
        f"{len(interrupted)} interrupted; all {SWEEP_TRIALS} done after {total:.1f} s; peaks "
        f"(admitted, waiting, running pods, clusters): try 1 {first.peak_admitted}, {first.peak_pending}, "
        f"{first.peak_pods}, {first.peak_clusters}; try 2 {retry.peak_admitted}, {retry.peak_pending}, "
        f"{retry.peak_pods}, {retry.peak_clusters}; "
        f"{first.samples + retry.samples} samples"
    )


# Namespace per training under Kueue (its copies and LocalQueue): with these controllers,
# started once for both modules.
from k8s_integration._kueue_own_namespace import (  # noqa: E402, F401 - collected here
    sources,
    test_own_namespace_gets_pull_secret_account_and_queue_and_goes_with_the_run,
)
