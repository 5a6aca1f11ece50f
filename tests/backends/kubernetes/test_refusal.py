"""Pods the API server refuses to create: what a Job's ``FailedCreate`` Events say, and
what the wait makes of them (no server; the real API server's refusals are in
tests/k8s_integration/test_refused_pods.py)."""

from __future__ import annotations

import pytest

from airflow_tfk.backends.kubernetes import watch as _k8s_watch
from airflow_tfk.backends.kubernetes.cluster import Interpreter
from airflow_tfk.backends.kubernetes.refusal import Refusal, classify, refusal_of, short_of_pods
from airflow_tfk.backends.kubernetes.status import job_info
from airflow_tfk.backends.kubernetes.watch import WatchSession
from airflow_tfk.core.status import Phase
from tests.backends.pods import T0_EPOCH, job

QUOTA = (
    'Error creating: pods "c-worker-1-x7" is forbidden: exceeded quota: q, requested: pods=1, '
    "used: pods=2, limited: pods=2"
)


@pytest.mark.parametrize(
    "message, reason, permanent",
    [
        (QUOTA, "QuotaExceeded", False),
        (
            'Error creating: pods "p" is forbidden: failed quota: q: must specify limits.cpu',
            "QuotaNeedsResources",
            True,
        ),
        (
            'Error creating: pods "p" is forbidden: violates PodSecurity "restricted:latest": '
            "allowPrivilegeEscalation != false",
            "PodSecurity",
            True,
        ),
        (
            'Error creating: pods "p" is forbidden: maximum cpu usage per Container is 500m, but limit is 2',
            "LimitRange",
            True,
        ),
        (
            'Error creating: admission webhook "validate.kyverno.svc" denied the request: no GPUs here',
            "AdmissionDenied",
            True,
        ),
        (
            "Error creating: pods \"p\" is forbidden: ValidatingAdmissionPolicy 'no-workers' with binding "
            "'b' denied request: workers are not allowed",
            "AdmissionDenied",
            True,
        ),
        (
            'Error creating: pods "p" is forbidden: error looking up service account ns/trainer: '
            'serviceaccount "trainer" not found',
            "ServiceAccountMissing",
            False,
        ),
        ("Error creating: Internal error occurred: something new", "FailedCreate", False),
    ],
)
def test_each_refusal_is_named_by_its_cause(message, reason, permanent):
    assert classify(message) == (reason, permanent)


def _event(message: str, first: float, last: float) -> dict:
    from datetime import UTC, datetime

    def stamp(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    return {"message": message, "firstTimestamp": stamp(first), "lastTimestamp": stamp(last)}


def test_only_a_recent_refusal_counts_and_it_leads_with_the_cause():
    now = T0_EPOCH + 1000
    assert refusal_of([_event(QUOTA, T0_EPOCH, T0_EPOCH + 10)], now) is None  # long over
    found = refusal_of([_event(QUOTA, now - 60, now - 50), _event(QUOTA, now - 30, now - 5)], now)
    assert found is not None
    assert (found.reason, found.since, found.permanent) == ("QuotaExceeded", now - 60, False)
    assert found.message.startswith("the API server refused the pod: exceeded quota: q"), found.message


def _counted(n: int, *, active: int, ready: int, completed: str = "", suspend: bool = False) -> dict:
    j = job("worker", n, backoff_limit_per_index=1, completed=completed)
    j["status"].update(active=active, ready=ready)
    j["spec"]["suspend"] = suspend
    return j


def test_a_job_is_short_of_pods_only_when_it_should_run_more():
    info = job_info(_counted(3, active=1, ready=1))
    assert info is not None and short_of_pods(info)
    for ok in (
        _counted(3, active=3, ready=0),
        _counted(3, active=1, ready=1, completed="0-1"),
        _counted(3, active=0, ready=0, suspend=True),  # queued by Kueue: held back on purpose
    ):
        info = job_info(ok)
        assert info is not None and not short_of_pods(info), ok


def _session(*jobs: dict, timeout: float = 300) -> WatchSession:
    s = WatchSession(Interpreter(timeout, 120))
    infos = [job_info(j) for j in jobs]
    s.set_jobs({i.role: i for i in infos if i is not None}, "1")
    return s


def test_the_wait_reads_a_short_jobs_events_and_names_the_refusal(monkeypatch):
    """A Job that runs fewer pods than it should has its Events read; a quota refusal keeps
    the missing tasks pending with that reason until the unschedulable timeout, then fails
    them; a permanent refusal fails them at once; once every pod exists it is over."""
    clock = [1000.0]
    monkeypatch.setattr(_k8s_watch.time, "monotonic", lambda: clock[0])
    s = _session(_counted(2, active=1, ready=1), timeout=60)
    assert s.refusal_reads() == [("worker", "c-worker")]  # a wait that starts on it: at once
    now = _k8s_watch.time.time()
    s.set_refusal(
        "worker", Refusal("QuotaExceeded", "the API server refused the pod: exceeded quota", now, False)
    )
    status = s.changed_status()
    assert status is not None
    pending = [t for t in status.of_role("worker") if t.reason == "QuotaExceeded"]
    assert pending and all(t.phase is Phase.PENDING for t in pending), status
    assert s.refusal_reads() == [] and 0 < s.next_due() <= 2
    s.set_refusal("worker", Refusal("QuotaExceeded", "exceeded quota", now - 61, False))
    status = s.changed_status()
    assert status is not None and status.failed(), status
    assert status.failed()[0].reason == "QuotaExceeded"
    s.set_refusal("worker", Refusal("AdmissionDenied", "denied request: no workers", now, True))
    status = s.changed_status()
    assert status is not None and [t.reason for t in status.failed()] == ["AdmissionDenied"]
    # every pod made: the refusal is over, nothing more to read
    s.on_event({"type": "MODIFIED", "object": _counted(2, active=2, ready=2)})
    status = s.changed_status()
    assert status is not None and not status.failed()
    assert [t.phase for t in status.of_role("worker")] == [Phase.RUNNING] * 2
    assert s.refusal_reads() == [] and not s.tracker.interp.refused


def test_a_retry_backoff_without_a_refusal_stays_plain_pending(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(_k8s_watch.time, "monotonic", lambda: clock[0])
    s = _session(_counted(2, active=2, ready=2))
    s.changed_status()
    s.on_event({"type": "MODIFIED", "object": _counted(2, active=1, ready=1)})
    assert s.refusal_reads() == []  # not at once: the controller may be making the pod
    clock[0] += _k8s_watch.PENDING_FIRST_READ
    assert s.refusal_reads() == [("worker", "c-worker")]
    s.set_refusal("worker", None)
    status = s.changed_status() or s.tracker.snapshot()
    assert not status.failed() and {t.reason for t in status.of_role("worker")} == {""}


def test_an_object_refused_at_create_is_named_by_its_cause():
    from airflow_tfk.backends.kubernetes.backend import ObjectRefused
    from airflow_tfk.backends.kubernetes.refusal import detail
    from airflow_tfk.kube.api import KubernetesApiError

    rbac = (
        'jobs.batch "c-worker" is forbidden: User "system:serviceaccount:a:airflow" cannot patch '
        'resource "jobs" in API group "batch" in the namespace "b"'
    )
    assert classify(rbac) == ("RBACForbidden", True)
    assert detail(rbac).startswith('User "system:serviceaccount:a:airflow" cannot patch')
    err = ObjectRefused(KubernetesApiError("apply Job c-worker", 403, rbac), "c", 3, [])
    assert str(err).startswith(
        'RBACForbidden: the API server refused Job c-worker of cluster c: User "system'
    )
    assert str(err).endswith("(HTTP 403); the 3 objects it had created were removed")
    assert isinstance(err, KubernetesApiError) and err.status == 403
    left = ObjectRefused(KubernetesApiError("apply Service s", 422, "invalid"), "c", 2, ["Job c-ps"])
    assert str(left).startswith("Refused: ") and "could not remove 1 of the 2 objects" in str(left)
