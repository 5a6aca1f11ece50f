"""Layout and admission options: ``layout: jobset`` renders one JobSet with a replicated
Job per role (success policy on the decisive role, no restarts, publishNotReadyAddresses,
a TTL) whose TF_CONFIG addresses are the names JobSet gives the pods; ``queue_name`` puts
either layout under a Kueue LocalQueue (suspended, with Kueue's label); bad values name
the field."""

from __future__ import annotations

import json

import pytest

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.admission import JOBSET_API_VERSION, KUEUE_QUEUE_LABEL, POD_GROUP_API_VERSION
from airflow_tfk.spec.cluster import TFClusterSpec
from tests.helpers import MODE_SHAPES, NIGHTLY, shaped_spec

IDENTITY = NIGHTLY
MODES = MODE_SHAPES


def make(mode: str = "between_graph", **changes) -> TFClusterSpec:
    return shaped_spec(MODES[mode], **{"max_duration_seconds": 7200, "retries_per_index": 2, **changes})


def jobset_of(manifests):
    (js,) = [m for m in manifests if m["kind"] == "JobSet"]
    return js


# -- options -----------------------------------------------------------------------------
def test_defaults_keep_the_jobs_layout_unqueued():
    spec = make()
    assert (spec.layout.value, spec.queue_name, spec.capacity_check.value) == ("jobs", None, "off")
    kinds = [m["kind"] for m in render(spec)]
    assert "JobSet" not in kinds and "Job" in kinds
    for m in render(spec):
        assert KUEUE_QUEUE_LABEL not in m["metadata"]["labels"]
        assert "suspend" not in m.get("spec", {})


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("layout", "pods", "jobs, jobset"),
        ("capacity_check", "maybe", "off, warn, fail"),
        ("queue_name", "Team_A", "LocalQueue name"),
        ("queue_name", "a" * 64, "at most 63"),
        ("queue_name", 7, "LocalQueue name"),
    ],
)
def test_bad_values_name_the_field(field, value, words):
    with pytest.raises(SpecError) as err:
        make(**{field: value})
    assert err.value.field == field and words in str(err.value)


def test_jobset_hostnames_are_checked_against_the_dns_limit():
    # <name>-worker-0-<i> is two characters longer than the Jobs layout's <name>-worker-<i>
    name = "n" + "x" * 50  # 51 + len("-worker-999") = 62 <= 63; + "-0" = 64 > 63
    make("all_reduce", name=name, worker={"replicas": 1000})
    with pytest.raises(SpecError, match="would exceed 63"):
        make("all_reduce", name=name, worker={"replicas": 1000}, layout="jobset")


def test_round_trip():
    spec = make(layout="jobset", queue_name="team-a", capacity_check="fail")
    assert TFClusterSpec.from_dict(spec.to_dict()) == spec


# -- the JobSet ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", sorted(MODES))
def test_one_jobset_with_a_replicated_job_per_role(mode):
    spec = make(mode, layout="jobset", storage={"data": {"size": "1Gi"}})
    manifests = render(spec, IDENTITY)
    assert [m["kind"] for m in manifests] == ["NetworkPolicy", "PersistentVolumeClaim", "JobSet"]
    js = jobset_of(manifests)
    assert js["apiVersion"] == JOBSET_API_VERSION
    assert js["metadata"]["name"] == "imagenet" and js["metadata"]["namespace"] == "ml"
    assert js["metadata"]["labels"][naming.LABEL_CLUSTER] == "imagenet"
    assert js["metadata"]["labels"].items() >= IDENTITY.labels().items()
    s = js["spec"]
    assert s["network"] == {
        "enableDNSHostnames": True,
        "subdomain": "imagenet",
        "publishNotReadyAddresses": True,
    }
    decisive = "chief" if mode == "parameter_server" else "worker"
    assert s["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [decisive]}
    assert s["failurePolicy"] == {"maxRestarts": 0}
    assert s["ttlSecondsAfterFinished"] == spec.ttl_seconds_after_finished  # the retention
    assert "suspend" not in s
    short = jobset_of(render(make(mode, layout="jobset", ttl_seconds_after_finished=60), IDENTITY))
    assert short["spec"]["ttlSecondsAfterFinished"] == 60
    rjobs = {rj["name"]: rj for rj in s["replicatedJobs"]}
    assert list(rjobs) == list(spec.roles())
    for role, rj in rjobs.items():
        assert rj["replicas"] == 1
        job = rj["template"]["spec"]
        n = spec.roles()[role].replicas
        assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", n, n)
        assert job["backoffLimitPerIndex"] == 2 and job["activeDeadlineSeconds"] == 7200
        assert job["maxFailedIndexes"] == 0  # a task that fails for good fails the JobSet at once
        permanent = [
            r["onExitCodes"]["values"]
            for r in job["podFailurePolicy"]["rules"]
            if r.get("onExitCodes", {}).get("operator") == "In" and r["action"] != "Ignore"
        ]
        assert permanent == [[1, 2, 126, 127]]
        pod = job["template"]
        assert pod["spec"]["restartPolicy"] == "Never"  # PS included: JobSet ends them
        labels = pod["metadata"]["labels"]
        assert labels[naming.LABEL_CLUSTER] == "imagenet" and labels[naming.LABEL_ROLE] == role
        assert rj["template"]["metadata"]["labels"][naming.LABEL_ROLE] == role  # the child Job's


@pytest.mark.parametrize("mode", sorted(MODES))
def test_tf_config_names_the_pods_jobset_makes(mode):
    spec = make(mode, layout="jobset")
    js = jobset_of(render(spec))
    env = {
        e["name"]: e
        for e in js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
            "env"
        ]
    }
    cluster = json.loads(env["TFK_CLUSTER"]["value"])
    for role, rs in spec.cluster_roles().items():
        # JobSet names pod i of Job 0 of replicated job <role> "<jobset>-<role>-0-<i>",
        # in the subdomain of its headless Service (named like the JobSet)
        assert cluster[role] == [f"imagenet-{role}-0-{i}.imagenet.ml.svc:2222" for i in range(rs.replicas)]
    assert "evaluator" not in cluster
    assert env["TFK_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    )


def test_queue_name_suspends_the_jobset_and_labels_it():
    js = jobset_of(render(make("parameter_server", layout="jobset", queue_name="team-a")))
    assert js["spec"]["suspend"] is True
    assert js["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-a"
    for rj in js["spec"]["replicatedJobs"]:  # Kueue manages the JobSet, not its Jobs or pods
        assert KUEUE_QUEUE_LABEL not in rj["template"]["metadata"]["labels"]
        assert KUEUE_QUEUE_LABEL not in rj["template"]["spec"]["template"]["metadata"]["labels"]


def test_queue_name_in_the_jobs_layout_suspends_each_job_and_labels_each_workload():
    manifests = render(make("parameter_server", queue_name="team-a"))
    workloads = [m for m in manifests if m["kind"] == "Job"]
    # the PS too: Kueue's batch/job integration queues every pod of the cluster
    assert sorted(m["metadata"]["name"] for m in workloads) == [
        "imagenet-chief",
        "imagenet-evaluator",
        "imagenet-ps",
        "imagenet-worker",
    ]
    for m in workloads:
        assert m["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-a"
        assert KUEUE_QUEUE_LABEL not in m["spec"]["template"]["metadata"]["labels"]
        assert m["spec"]["suspend"] is True
    for m in manifests:
        if m["kind"] != "Job":
            assert KUEUE_QUEUE_LABEL not in m["metadata"]["labels"]


def test_large_jobset_clusters_get_the_compact_map_with_jobsets_names():
    # above the full map's size the runtime expands a pattern: it must be JobSet's names too
    spec = make("between_graph", layout="jobset", worker={"replicas": 600})
    js = jobset_of(render(spec))
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    cluster = json.loads(env["TFK_CLUSTER"])
    assert cluster["worker"] == {"pattern": "imagenet-worker-0-{i}.imagenet.ml.svc:2222", "count": 600}
    assert cluster["ps"] == {"pattern": "imagenet-ps-0-{i}.imagenet.ml.svc:2222", "count": 2}


# -- native gang scheduling ---------------------------------------------------------------
def pod_groups(manifests):
    return [m for m in manifests if m["kind"] == "PodGroup"]


def test_without_gang_scheduling_no_pod_group_and_no_pod_names_one():
    manifests = render(make("parameter_server"))
    assert pod_groups(manifests) == []
    for job in (m for m in manifests if m["kind"] == "Job"):
        assert "schedulingGroup" not in job["spec"]["template"]["spec"]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_native_gang_is_one_pod_group_of_every_task_made_before_the_jobs(mode):
    spec = make(mode, gang_scheduling="native")
    manifests = render(spec, IDENTITY)
    (group,) = pod_groups(manifests)
    tasks = sum(s["replicas"] for r, s in MODES[mode].items() if isinstance(s, dict))
    assert group["apiVersion"] == POD_GROUP_API_VERSION == "scheduling.k8s.io/v1beta1"
    assert group["metadata"]["name"] == "imagenet-gang" and group["metadata"]["namespace"] == "ml"
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": tasks}}}
    # found and deleted with the cluster by its label, owned like every other object
    labels = group["metadata"]["labels"]
    assert labels[naming.LABEL_CLUSTER] == "imagenet"
    assert IDENTITY.labels().items() <= labels.items()
    assert IDENTITY.annotations().items() <= group["metadata"]["annotations"].items()
    kinds = [m["kind"] for m in manifests]
    assert kinds.index("PodGroup") < kinds.index("Job")
    jobs = [m for m in manifests if m["kind"] == "Job"]
    assert len(jobs) == len(spec.roles())
    for job in jobs:
        assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "imagenet-gang"}


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"gang_scheduling": "all"}, "must be one of none, native"),
        ({"gang_scheduling": "native", "layout": "jobset"}, "needs layout: jobs"),
        ({"gang_scheduling": "native", "queue_name": "team-a"}, "cannot be combined with queue_name"),
    ],
)
def test_gang_scheduling_refusals_name_the_field(changes, words):
    with pytest.raises(SpecError) as err:
        make(**changes)
    assert err.value.field == "gang_scheduling" and words in str(err.value), str(err.value)


def test_gang_scheduling_round_trips():
    spec = make(gang_scheduling="native")
    assert TFClusterSpec.from_dict(spec.to_dict()) == spec
    assert spec.gang_scheduling.value == "native" and make().gang_scheduling.value == "none"
