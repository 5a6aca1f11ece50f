"""Nothing left behind, against the real API server, Job controller, TTL controller,
garbage collector and namespace controller (KWOK plays the training processes).

- after a run with each clean-up policy, the objects left are exactly those the policy
  names: ``cleanup='ps'`` keeps the finished worker Job and its Service, the NetworkPolicy,
  the claim made from ``size:`` and the per-training namespace; ``on_failure='keep'`` the
  same after a failure; ``cleanup='all'`` nothing;
- the retention (``ttl_seconds_after_finished``): the TTL controller removes the Jobs, the
  rest stays; one sweep then removes it, namespace included;
- a deferred training whose task is never resumed (its DAG paused, or no worker slot):
  the trigger alone deletes the PS, the grace period after the workers finished.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from k8s import harness
from kubernetes import client

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.run.orphans import sweep
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

#: Long enough for a run to end and be looked at before the TTL controller acts.
RETENTION = 10
#: What the provider creates (the controllers' pods and slices follow their owners).
MADE = [
    ("batch/v1", "jobs"),
    ("v1", "services"),
    ("v1", "persistentvolumeclaims"),
    ("networking.k8s.io/v1", "networkpolicies"),
]


def _made(api, namespace: str, cluster: str) -> set[str]:
    return set(_tfk.objects(api, namespace, cluster, kinds=MADE))


def _fail_worker_0(pod: client.V1Pod) -> dict[str, str] | None:
    labels = pod.metadata.labels or {}
    if labels.get(naming.LABEL_ROLE) != "worker":
        return None
    index = _tfk.index_of(pod)
    return {harness.EXIT_CODE: "3" if index == 0 else "0"}


def _run(api, tfk_ns: str, run_id: str, **op_args: Any) -> tuple[str, str, str, float]:
    """One training in its own namespace with a claim made from ``size:``; returns the
    cluster, its namespace, its PV and when its last task was told to exit."""
    ctx = _tfk.task_context(run_id)
    name = _tfk.cluster_name(ctx)
    ns = f"{tfk_ns}-{name}"
    pv = _tfk.static_volume(api, ns, f"{name}-models")
    data = _tfk.spec(
        tfk_ns,
        workers=2,
        ps=1,
        namespace_per_training=True,
        storage={"models": {"size": "1Gi"}},
        ttl_seconds_after_finished=RETENTION,
        permanent_exit_codes=[3],
    )
    rule = _fail_worker_0 if op_args.get("on_failure") else None
    with _tfk.PodDriver(api, ns, name, rule=rule) as driver:
        if op_args.get("on_failure"):
            from airflow_tfk.core.errors import TrainingFailed

            with pytest.raises(TrainingFailed):
                _tfk.make_op(tfk_ns, data, **op_args).execute(ctx)
        else:
            assert _tfk.make_op(tfk_ns, data, **op_args).execute(ctx)["outcome"] == "succeeded"
    assert not driver.errors, driver.errors
    return name, ns, pv, max(driver.done.values())


def test_each_policy_keeps_what_it_names_until_the_retention_then_one_sweep_leaves_nothing(
    k8s_api, tfk_ns, tfk_conn
) -> None:
    t0 = time.monotonic()
    kept: dict[str, tuple[str, str]] = {}  # run id -> (cluster, namespace)
    pvs: list[str] = []
    try:
        for run_id, op_args in (
            ("manual__keep-ps", {"cleanup": "ps"}),
            ("manual__keep-failed", {"on_failure": "keep"}),
        ):
            name, ns, pv, done = _run(k8s_api, tfk_ns, run_id, **op_args)
            pvs.append(pv)
            left = _made(k8s_api, ns, name)
            assert time.time() - done < RETENTION, "looked after the retention; the check proves nothing"
            # Both keep the worker Job (its pods hold the logs) and what it needs to be read
            # and debugged; the PS, which never exit, are gone.
            assert left == {
                f"jobs/{name}-worker",
                f"services/{name}-worker",
                f"networkpolicies/{naming.network_policy_name(name)}",
                f"persistentvolumeclaims/{name}-models",
                f"namespaces/{ns}",
            }, (run_id, sorted(left))
            kept[run_id] = (name, ns)

        name, ns, pv, _ = _run(k8s_api, tfk_ns, "manual__all", cleanup="all")
        pvs.append(pv)
        _tfk.wait_no_leftovers(k8s_api, ns, name, timeout=90)  # the namespace too
        print(f"three runs and their checks: {time.monotonic() - t0:.1f}s")

        # The retention ends: the TTL controller deletes the finished Jobs, nothing else.
        for name, ns in kept.values():
            _tfk.wait_for(
                f"the TTL controller to delete the Jobs of {name}",
                lambda name=name, ns=ns: not any(k.startswith("jobs/") for k in _made(k8s_api, ns, name)),
                timeout=RETENTION + 60,
            )
            assert _made(k8s_api, ns, name) == {  # the TTL alone leaves these behind
                f"services/{name}-worker",
                f"networkpolicies/{naming.network_policy_name(name)}",
                f"persistentvolumeclaims/{name}-models",
                f"namespaces/{ns}",
            }
        t_sweep = time.monotonic()
        owners = {
            RunIdentity("k8s_it", "train", "manual__keep-ps", -1): "success",
            RunIdentity("k8s_it", "train", "manual__keep-failed", -1): "failed",
        }
        said: list[str] = []
        # Every namespace (the per-training ones are found by their label); clusters of
        # other tests count as running, so they are not this test's to sweep.
        swept = sweep(
            KubernetesBackend(conn_id=tfk_conn),
            None,
            lambda identity: owners.get(identity, "running"),
            emit=said.append,
        )
        assert {(r.ref.name, r.ref.namespace) for r in swept if r.deleted} == set(kept.values()), said
        for name, ns in kept.values():
            _tfk.wait_no_leftovers(k8s_api, ns, name, timeout=90)
        print(f"one sweep and the namespace controller: {time.monotonic() - t_sweep:.1f}s")
    finally:
        for pv in pvs:
            client.CoreV1Api(k8s_api).delete_persistent_volume(pv)


def test_a_deferred_training_never_resumed_releases_its_ps_after_the_grace_period(
    k8s_api, tfk_ns, tfk_conn
) -> None:
    """The DAG was paused while the task was deferred: Airflow never resumes it, so only
    the trigger can end the PS, which never exit by themselves."""
    from airflow_tfk._airflow.compat import TaskDeferred

    grace = 2
    ctx = _tfk.task_context("manual__paused")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(tfk_ns, _tfk.spec(tfk_ns, workers=2, ps=2, ps_grace_seconds=grace), deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(ctx)
    trigger = type(deferred.value.trigger)(**deferred.value.trigger.serialize()[1])

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    with _tfk.PodDriver(k8s_api, tfk_ns, name) as driver:
        event = asyncio.run(first_event())
    fired = time.time()
    # No execute_complete: the task is never resumed.
    assert event["status"] == "success" and event["released"] == ["ps"], event
    workers_done = max(driver.done.values())
    assert grace <= fired - workers_done <= grace + 15, fired - workers_done
    left = _made(k8s_api, tfk_ns, name)
    assert f"jobs/{name}-ps" not in left and f"services/{name}-ps" not in left, sorted(left)
    assert f"jobs/{name}-worker" in left  # the rest is the resumed task's (or the retention's)
    _tfk.wait_for(
        "the PS pods to be garbage-collected",
        lambda: not _tfk.pods(k8s_api, tfk_ns, name, "ps"),
        timeout=30,
    )
    KubernetesBackend(conn_id=tfk_conn).delete(ClusterRef(name, tfk_ns), "test over")
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
