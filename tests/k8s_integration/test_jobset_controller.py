"""``layout: jobset`` with the real JobSet controller (sigs.k8s.io/jobset v0.12.0, built
from its Go module by tests/k8s/jobset/build.sh, webhooks included) on the KWOK control
plane:

- success: the workers finish, the provider's wait succeeds, and JobSet's own success
  policy (all workers) ends the parameter servers without the provider deleting them;
- failure: a worker exits with a permanent code, its index fails at once, the JobSet fails
  (no restarts), and the wait reports the task and its exit code;
- clean-up: delete() leaves nothing, JobSet included; after success the provider sends no
  request for the Jobs layout's PS objects (the JobSet layout has none) and says that
  JobSet ended the PS;
- under Airflow (TFTrainingOperator): a retry whose first try died while deferred
  reattaches to the same JobSet, the task log follows its pods (progress lines), and the
  task succeeds.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred
from k8s import addons, harness

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.kube.api import SyncApi
from airflow_tfk.run.policies import Outcome
from airflow_tfk.run.wait import wait_for_cluster
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_integration import _tfk

pytestmark = [pytest.mark.k8s, pytest.mark.addons("jobset")]
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures
IDENTITY = RunIdentity("k8s_it", "train", "scheduled__2026-01-01T00:00:00+00:00", -1)
JOBSETS = ("jobset.x-k8s.io/v1alpha2", "jobsets")


@pytest.fixture(scope="module")
def jobset_controller(request, k8s_cluster, k8s_api):
    workdir = Path(tempfile.mkdtemp(prefix="tfk-jobset-"))
    failed_before = request.session.testsfailed
    controller = addons.JobSetController(k8s_cluster, workdir, addons.jobset_binary()).start(k8s_api)
    try:
        yield controller
    finally:
        controller.stop(k8s_api)
        if request.session.testsfailed > failed_before:
            print(f"JobSet controller log kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def _jobset(api, ns: str, name: str) -> dict | None:
    found = _tfk.objects(api, ns, name, kinds=[JOBSETS])
    return found.get(f"jobsets/{name}")


def _condition(js: dict | None, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in ((js or {}).get("status") or {}).get("conditions") or []
    )


def test_success_policy_ends_the_ps_and_delete_cleans_up(k8s_api, jobset_controller, tfk_ns, tfk_conn):
    backend = KubernetesBackend(conn_id=tfk_conn)
    spec = TFClusterSpec.from_dict(
        _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1, name="jsok", layout="jobset")
    )
    ref = backend.create(spec, IDENTITY)
    _tfk.wait_for("3 pods", lambda: len(_tfk.pods(k8s_api, tfk_ns, "jsok")) == 3, timeout=60)
    # JobSet named them as TF_CONFIG says: <jobset>-<role>-0-<index>
    hostnames = sorted(p.spec.hostname for p in _tfk.pods(k8s_api, tfk_ns, "jsok"))
    assert hostnames == ["jsok-ps-0-0", "jsok-worker-0-0", "jsok-worker-0-1"]
    assert {p.spec.subdomain for p in _tfk.pods(k8s_api, tfk_ns, "jsok")} == {"jsok"}
    _tfk.finish(k8s_api, tfk_ns, "jsok", "worker", 0, count=2)
    lines: list[str] = []
    verdict = wait_for_cluster(
        backend, ref, spec.mode, {"ps": 1, "worker": 2}, timeout=60, progress_interval=3600, emit=lines.append
    )
    assert verdict.outcome is Outcome.SUCCEEDED, (verdict, lines)
    _tfk.wait_for(
        "the JobSet to complete",
        lambda: _condition(_jobset(k8s_api, tfk_ns, "jsok"), "Completed"),
        timeout=60,
    )
    # JobSet itself ended the parameter server: the provider deleted nothing yet
    _tfk.wait_for("the PS pod gone", lambda: not _tfk.pods(k8s_api, tfk_ns, "jsok", "ps"), timeout=60)
    backend.delete(ref)
    _tfk.wait_for("no JobSet left", lambda: _jobset(k8s_api, tfk_ns, "jsok") is None, timeout=60)
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, "jsok", timeout=90)


def test_a_permanent_failure_fails_the_jobset_and_the_wait(k8s_api, jobset_controller, tfk_ns, tfk_conn):
    backend = KubernetesBackend(conn_id=tfk_conn)
    spec = TFClusterSpec.from_dict(
        _tfk.spec(tfk_ns, "all_reduce", workers=2, ps=0, name="jsfail", layout="jobset")
    )
    ref = backend.create(spec, IDENTITY)
    _tfk.finish(k8s_api, tfk_ns, "jsfail", "worker", 1, indexes=[1])
    verdict = wait_for_cluster(backend, ref, spec.mode, {"worker": 2}, timeout=60, progress_interval=3600)
    assert verdict.outcome is Outcome.FAILED, verdict
    assert verdict.failed_task is not None and verdict.failed_task.name == "worker-1", verdict
    assert verdict.failed_task.exit_code == 1
    _tfk.wait_for(
        "the JobSet to fail", lambda: _condition(_jobset(k8s_api, tfk_ns, "jsfail"), "Failed"), timeout=60
    )
    backend.delete(ref)
    _tfk.wait_for("no JobSet left", lambda: _jobset(k8s_api, tfk_ns, "jsfail") is None, timeout=60)
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, "jsfail", timeout=90)


def test_under_airflow_a_retry_reattaches_and_shows_progress(
    k8s_api, jobset_controller, tfk_ns, tfk_conn, capfd
):
    ctx = _tfk.task_context("manual__jobset_retry")
    name = _tfk.cluster_name(ctx)
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1, layout="jobset")
    with pytest.raises(TaskDeferred):
        _tfk.make_op(tfk_ns, spec, deferrable=True).execute(ctx)  # try 1 dies while deferred
    _tfk.wait_for(
        "3 running pods",
        lambda: (
            len(p := _tfk.pods(k8s_api, tfk_ns, name)) == 3 and all(x.status.phase == "Running" for x in p)
        ),
        timeout=60,
    )
    uid = (_jobset(k8s_api, tfk_ns, name) or {})["metadata"]["uid"]
    before = {p.metadata.name for p in _tfk.pods(k8s_api, tfk_ns, name)}
    capfd.readouterr()

    def staggered(pod):  # worker i ends (i+1)*3 s after the retry started: one line each
        rule = _tfk.default_rule(pod)
        return rule and {**rule, harness.EXIT_DELAY: f"{(_tfk.index_of(pod) + 1) * 3}s"}

    retry = _tfk.task_context("manual__jobset_retry", try_number=2)
    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=staggered) as driver:
        result = _tfk.make_op(tfk_ns, spec).execute(retry)
    out = "".join(capfd.readouterr())
    assert result["outcome"] == "succeeded", out[-3000:]
    assert "reattaching to existing cluster" in out, out[-3000:]
    # The task log followed the JobSet's pods to the end, as for the Jobs layout.
    progress = [line.split("cluster: ", 1)[1] for line in out.splitlines() if "cluster: ps " in line]
    for step in ("worker 2 running", "worker 1 running, 1 succeeded", "worker 2 succeeded"):
        assert any(line.startswith(f"ps 1 running; {step}") for line in progress), (step, progress)
    # Try 1's pods did the work (none were made again), in the same JobSet if it is still
    # there (the clean-up after success may have removed it already), and no other.
    assert driver.done and set(driver.done) <= before, (driver.done, before)
    jobsets = _tfk.objects(k8s_api, tfk_ns, name, kinds=[JOBSETS])
    assert list(jobsets) == [f"jobsets/{name}"] or not jobsets, jobsets
    if jobsets:
        assert jobsets[f"jobsets/{name}"]["metadata"]["uid"] == uid
    # the clean-up after success ended the PS (the finished workers stay until the TTL)
    _tfk.wait_for("the PS gone", lambda: not _tfk.pods(k8s_api, tfk_ns, name, "ps"), timeout=60)


def test_after_success_no_request_goes_to_objects_the_jobset_layout_lacks(
    k8s_api, jobset_controller, tfk_ns, tfk_conn, capfd, monkeypatch
):
    """The clean-up after success (TFTrainingOperator, cleanup=ps) of a JobSet training:
    JobSet's success policy ends the PS, so the provider neither waits the PS grace period
    nor deletes anything: no request goes to the Jobs layout's ``<name>-ps`` Job or Service,
    which this layout does not have."""
    sent: list[tuple[str, str, Any]] = []  # every request of the provider's sync client
    send = SyncApi._send

    def recording(self: SyncApi, call: Any) -> Any:
        try:
            resp = send(self, call)
        except Exception as exc:
            sent.append((call.method, call.path, getattr(exc, "status", exc)))
            raise
        sent.append((call.method, call.path, resp.status))
        return resp

    monkeypatch.setattr(SyncApi, "_send", recording)
    ctx = _tfk.task_context("manual__jobset_cleanup")
    name = _tfk.cluster_name(ctx)
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1, layout="jobset", ps_grace_seconds=600)
    capfd.readouterr()
    with _tfk.PodDriver(k8s_api, tfk_ns, name) as driver:  # the workers exit 0, the PS never
        result = _tfk.make_op(tfk_ns, spec).execute(ctx)
    out = "".join(capfd.readouterr())
    assert result["outcome"] == "succeeded", out[-3000:]
    assert not driver.errors, driver.errors
    assert [r for r in sent if r[0] == "DELETE"] == [], sent
    assert [r for r in sent if r[1].rsplit("/", 1)[-1] == f"{name}-ps"] == [], sent
    # Nothing answered 404 but Kueue's Workload lookup: Kueue is not installed here, and
    # while pods are pending the wait asks why (no Kueue API: not queued), by design.
    assert [r for r in sent if r[2] == 404 and not r[1].endswith("/workloads")] == [], sent
    said = f"training succeeded; the JobSet's success policy ends ps of cluster {name} (layout: jobset)"
    assert said in out, out[-3000:]
    assert "deleting ps in" not in out and "deleted ps" not in out, out[-3000:]  # no grace, no delete
    # ... and what it says is so: JobSet itself ended the PS.
    _tfk.wait_for("the PS pod gone", lambda: not _tfk.pods(k8s_api, tfk_ns, name, "ps"), timeout=60)
    assert _condition(_jobset(k8s_api, tfk_ns, name), "Completed")
    KubernetesBackend(conn_id=tfk_conn).delete(ClusterRef(name, tfk_ns))
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name, timeout=90)
