"""TFK_CLUSTER whose size does not grow with the task count (issue 10 item 8).

Ordinary clusters keep the full address map and a TF_CONFIG built by Kubernetes (any
TensorFlow image works); large ones carry a pattern and a count per role, which the
runtime expands into exactly the addresses the full map would hold.
"""

from __future__ import annotations

import json

import pytest

from airflow_tfk.core import naming
from airflow_tfk.render.manifests import FULL_CLUSTER_MAX_BYTES, render
from airflow_tfk.runtime.cluster import ClusterConfigError, ensure_tf_config, expand_cluster, task_info
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec


def spec(workers: int, ps: int = 2) -> TFClusterSpec:
    return TFClusterSpec(
        name="big",
        image="tf:1",
        command=("python", "t.py"),
        namespace="ml",
        ps=RoleSpec(replicas=ps),
        worker=RoleSpec(replicas=workers),
    )


def pod_env(manifests: list[dict], kind: str) -> dict[str, str]:
    m = next(m for m in manifests if m["kind"] == kind)
    env = m["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value") for e in env}


def full_map(s: TFClusterSpec) -> dict[str, list[str]]:
    return {
        role: [naming.task_address(s.name, role, i, s.namespace_name, s.port) for i in range(rs.replicas)]
        for role, rs in s.cluster_roles().items()
    }


def test_small_clusters_keep_the_full_map_and_a_tf_config_any_image_can_read() -> None:
    env = pod_env(render(spec(4)), "Job")
    assert json.loads(env["TFK_CLUSTER"]) == full_map(spec(4))
    assert "TF_CONFIG" in env and "$(TFK_CLUSTER)" in env["TF_CONFIG"]


@pytest.mark.parametrize("workers", [600, 10_000])
def test_large_clusters_carry_a_constant_size_map_that_expands_to_the_full_one(workers: int) -> None:
    s = spec(workers, ps=100)
    env = pod_env(render(s), "Job")
    assert len(env["TFK_CLUSTER"]) < 400  # the same at 600 and 10,000 tasks
    assert "TF_CONFIG" not in env  # the runtime builds it
    assert expand_cluster(json.loads(env["TFK_CLUSTER"])) == full_map(s)
    # The runtime's view of worker 7, from the pod's environment.
    pod = {"TFK_CLUSTER": env["TFK_CLUSTER"], "TFK_ROLE": "worker", "TFK_INDEX": "7"}
    info = ensure_tf_config(pod)
    assert info.address == full_map(s)["worker"][7]
    assert json.loads(pod["TF_CONFIG"]) == {"cluster": full_map(s), "task": {"type": "worker", "index": 7}}


def test_threshold_is_between_ordinary_and_large() -> None:
    assert len(json.dumps(full_map(spec(100)))) < FULL_CLUSTER_MAX_BYTES
    assert len(json.dumps(full_map(spec(600)))) > FULL_CLUSTER_MAX_BYTES


@pytest.mark.parametrize(
    "bad",
    [
        {"worker": {"pattern": "w:2222", "count": 2}},  # no {i}
        {"worker": {"pattern": "w-{i}:2222", "count": 0}},
        {"worker": {"pattern": "w-{i}:2222", "count": 10**9}},
        {"worker": {"pattern": "w-{i}-{i}:2222", "count": 2}},
        {"worker": {"pattern": "w-{i}", "count": 2}},  # no port
    ],
)
def test_malformed_patterns_are_clear_errors(bad: dict) -> None:
    with pytest.raises(ClusterConfigError, match="TFK_CLUSTER"):
        task_info({"TFK_CLUSTER": json.dumps(bad), "TFK_ROLE": "worker", "TFK_INDEX": "0"})
