"""Preemption, eviction and drain on Kubernetes are retried and never counted: the
``podFailurePolicy`` the templates render, read back through the status interpretation
the watch uses (the same rules Kubernetes applies), with ``retries_per_index: 0`` so any
counted failure would fail the training."""

from __future__ import annotations

import pytest

from airflow_tfk.backends.kubernetes.cluster import Interpreter
from airflow_tfk.backends.kubernetes.status import failure_action, job_info
from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.status import Phase
from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec
from tests.backends.pods import T0_EPOCH, pod, terminated

NOW = T0_EPOCH + 10
DISRUPTIONS = [
    ("eviction API", "EvictionByEvictionAPI"),
    ("node drain / graceful shutdown", "TerminationByKubelet"),
    ("scheduler preemption", "PreemptionByScheduler"),
    ("taint eviction", "DeletionByTaintManager"),
]


def _spec(layout: str = "jobs", **extra) -> TFClusterSpec:
    return TFClusterSpec.from_dict(
        {
            "name": "c",
            "image": "tf:2",
            "mode": "parameter_server",
            "command": ["python", "train.py"],
            "ps": {"replicas": 1},
            "worker": {"replicas": 3},
            "chief": {"replicas": 1},
            "storage": {"models": {"size": "1Gi"}},
            "retries_per_index": 0,
            "layout": layout,
            **extra,
        }
    )


def _job_templates(manifests: list[dict]) -> dict[str, dict]:
    """role -> the Job (jobs layout) or the JobSet's Job template (jobset layout)."""
    out = {}
    for m in manifests:
        if m["kind"] == "Job":
            out[m["metadata"]["labels"][naming.LABEL_ROLE]] = m
        elif m["kind"] == "JobSet":
            for rj in m["spec"]["replicatedJobs"]:
                out[rj["name"]] = {
                    "metadata": {"name": f"c-{rj['name']}", "labels": rj["template"]["metadata"]["labels"]},
                    "spec": rj["template"]["spec"],
                }
    return out


def _worker_job(layout: str = "jobs", **extra) -> dict:
    return _job_templates(render(_spec(layout, **extra)))["worker"]


def _status(job: dict, failed_pod: dict):
    info = job_info(job)
    assert info is not None
    status, _ = Interpreter(unschedulable_timeout=300, image_pull_timeout=120).status(
        [failed_pod], {info.role: info}, NOW
    )
    return status.task("worker", 0)


@pytest.mark.parametrize("layout", ["jobs", "jobset"])
@pytest.mark.parametrize(("what", "reason"), DISRUPTIONS, ids=[d[0] for d in DISRUPTIONS])
def test_a_disruption_is_retried_and_not_counted(layout, what, reason):
    job = _worker_job(layout)
    # killed at the end of the grace period (137), or by a permanent code on its way out:
    # the disruption decides, the exit code does not
    for code in (137, 143, 1):
        p = pod(
            "worker",
            0,
            "Failed",
            containers=terminated(code),
            conditions=[{"type": "DisruptionTarget", "status": "True", "reason": reason}],
        )
        assert failure_action(job_info(job), p) == "Ignore", (what, code)
        task = _status(job, p)
        assert task.phase is Phase.PENDING and task.reason == "Retrying", task
        assert "not counted against retries" in task.message, task.message
        assert task.restarts == 0, task  # nothing spent of retries_per_index


@pytest.mark.parametrize("layout", ["jobs", "jobset"])
def test_a_stop_on_notice_is_retried_and_not_counted_without_a_disruption_condition(layout):
    """A SIGTERM that comes with no DisruptionTarget (a pod deleted by hand, a drain
    through plain deletes): the runtime's own exit code after its checkpoint."""
    job = _worker_job(layout)
    p = pod("worker", 0, "Failed", containers=terminated(EXIT_PREEMPTED))
    assert failure_action(job_info(job), p) == "Ignore"
    task = _status(job, p)
    assert task.phase is Phase.PENDING and task.reason == "Retrying", task
    assert task.restarts == 0, task


@pytest.mark.parametrize("layout", ["jobs", "jobset"])
def test_a_permanent_exit_code_still_fails_the_index(layout):
    job = _worker_job(layout)
    p = pod("worker", 0, "Failed", containers=terminated(1))
    assert failure_action(job_info(job), p) == "FailIndex"
    assert _status(job, p).phase is Phase.FAILED


@pytest.mark.parametrize("layout", ["jobs", "jobset"])
def test_termination_grace_is_every_pods_grace_period(layout):
    for job in _job_templates(render(_spec(layout, termination_grace_seconds=90))).values():
        assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 90
    for job in _job_templates(render(_spec(layout))).values():  # the default fits a checkpoint
        assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60


def test_the_preempted_exit_code_cannot_be_made_permanent():
    with pytest.raises(SpecError) as err:
        _spec(permanent_exit_codes=[1, EXIT_PREEMPTED])
    assert err.value.field == "permanent_exit_codes" and str(EXIT_PREEMPTED) in str(err.value)


@pytest.mark.parametrize("bad", [0, -1, "60"])
def test_termination_grace_is_checked(bad):
    with pytest.raises(SpecError) as err:
        _spec(termination_grace_seconds=bad)
    assert err.value.field == "termination_grace_seconds"
