"""``placement`` in the rendered pods: a pod affinity to the cluster's own pods by the
level, beside the user's own terms, and Kueue's topology annotation when a queue admits the
cluster."""

from __future__ import annotations

from airflow_tfk.core import naming
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec

USER_TERM = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "kubernetes.io/hostname"}


def _pods(**changes):
    data = {
        "name": "p1",
        "image": "tf:1",
        "command": ["python", "train.py"],
        "mode": "between_graph",
        "ps": {"replicas": 1},
        "worker": {"replicas": 2},
        **changes,
    }
    return [
        d["spec"]["template"]["spec"] | {"_meta": d["spec"]["template"]["metadata"]}
        for d in render(TFClusterSpec.from_dict(data))
        if d["kind"] == "Job"
    ]


def test_required_placement_is_a_required_pod_affinity_beside_the_users_terms():
    pods = _pods(
        placement={"level": "topology.kubernetes.io/zone"},
        pod={"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [USER_TERM]}}},
    )
    assert len(pods) == 2
    for p in pods:
        terms = p["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms == [
            USER_TERM,
            {
                "labelSelector": {"matchLabels": {naming.LABEL_CLUSTER: "p1"}},
                "topologyKey": "topology.kubernetes.io/zone",
            },
        ]
        assert "kueue.x-k8s.io/podset-required-topology" not in (p["_meta"].get("annotations") or {})


def test_preferred_placement_is_a_preference_and_kueue_is_asked_through_its_annotation():
    (ps, worker) = _pods(placement={"level": "rack", "mode": "preferred"}, queue_name="team-a")
    for p in (ps, worker):
        (pref,) = p["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert pref["weight"] == 100 and pref["podAffinityTerm"]["topologyKey"] == "rack"
        assert p["_meta"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] == "rack"


def test_no_placement_no_affinity():
    assert all("affinity" not in p for p in _pods())
