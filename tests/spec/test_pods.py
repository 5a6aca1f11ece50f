"""The pod rules of the spec: every field accepted as data, and refused, naming it, where it
would break the cluster's contract."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_tfk.core.errors import SpecError, SpecErrors
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.pods import role_rules

BASE: dict[str, Any] = {
    "name": "t1",
    "image": "img",
    "command": ["python", "train.py"],
    "mode": "all_reduce",
    "worker": {"replicas": 2},
}

#: one spec that uses every pod field, cluster-wide and per role
EVERY: dict[str, Any] = {
    **BASE,
    "service_account": "trainer",
    "pod": {
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"tfk.airflow.apache.org/cluster": "t1"}},
                        },
                    }
                ]
            }
        },
        "topology_spread": [
            {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}
        ],
        "priority_class": "tfk-test-high",
        "runtime_class": "tfk-test-runc",
        "labels": {"team": "ml"},
        "annotations": {"example.com/owner": "ml-team"},
        "volumes": [
            {"name": "creds", "secret": {"secretName": "tfk-test-secret"}},
            {"name": "settings", "configMap": {"name": "tfk-test-config"}},
        ],
        "volume_mounts": [
            {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
            {"name": "settings", "mountPath": "/etc/settings", "readOnly": True},
        ],
        "shm_size": "64Mi",
        "env_from": [
            {"secretRef": {"name": "tfk-test-secret"}},
            {"configMapRef": {"name": "tfk-test-config"}},
        ],
        "env_value_from": {
            "DB_PASSWORD": {"secretKeyRef": {"name": "tfk-test-secret", "key": "password"}},
            "MODE_FROM_CONFIG": {"configMapKeyRef": {"name": "tfk-test-config", "key": "mode"}},
        },
        "sidecars": [{"name": "agent", "image": "busybox", "command": ["sleep", "3600"]}],
        "init_containers": [{"name": "prepare", "image": "busybox", "command": ["true"]}],
    },
}
EVERY["worker"] = {
    "replicas": 2,
    "pod": {
        "service_account": "worker-sa",
        "priority_class": "tfk-test-workers",
        "labels": {"tier": "workers"},
        "annotations": {"example.com/role": "worker"},
        "template_patch": {
            "spec": {
                "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["tfk-patched.example"]}],
                "containers": [{"name": "tensorflow", "workingDir": "/tfk/scratch"}],
            }
        },
    },
}


def spec(**changes: Any) -> TFClusterSpec:
    return TFClusterSpec.from_dict({**BASE, **changes})


def refused(data: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        TFClusterSpec.from_dict(data)
    err = info.value
    return err.errors[0] if isinstance(err, SpecErrors) else err


def test_every_field_is_accepted_and_round_trips() -> None:
    s = TFClusterSpec.from_dict(EVERY)
    again = TFClusterSpec.from_dict(s.to_dict())
    assert again == s and again.fingerprint() == s.fingerprint()
    assert s.worker.pod.priority_class == "tfk-test-workers"


def test_the_role_adds_to_the_cluster_and_wins_where_both_say() -> None:
    joined = role_rules(TFClusterSpec.from_dict(EVERY), "worker")
    assert joined["priority_class"] == "tfk-test-workers"  # the role's scalar wins
    assert joined["runtime_class"] == "tfk-test-runc"  # the cluster's where the role is silent
    assert joined["service_account"] == "worker-sa"
    assert joined["labels"] == {"team": "ml", "tier": "workers"}
    assert joined["annotations"] == {"example.com/owner": "ml-team", "example.com/role": "worker"}
    assert [v["name"] for v in joined["volumes"]] == ["creds", "settings"]
    assert len(joined["patches"]) == 1


def test_an_item_of_the_same_name_replaces_the_clusters() -> None:
    s = spec(
        pod={"sidecars": [{"name": "agent", "image": "a:1"}]},
        worker={"replicas": 1, "pod": {"sidecars": [{"name": "agent", "image": "a:2"}]}},
    )
    assert role_rules(s, "worker")["sidecars"] == [{"name": "agent", "image": "a:2"}]


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"pod": {"sidecars": [{"name": "tensorflow", "image": "x"}]}}, "pod.sidecars[0].name", "training"),
        ({"pod": {"sidecars": [{"name": "a"}]}}, "pod.sidecars[0].image", "required"),
        (
            {"pod": {"sidecars": [{"name": "a", "image": "x", "restartPolicy": "Never"}]}},
            "pod.sidecars[0].restartPolicy",
            "platform",
        ),
        (
            {"pod": {"init_containers": [{"name": "Bad_Name", "image": "x"}]}},
            "pod.init_containers[0].name",
            "DNS",
        ),
        ({"pod": {"volumes": [{"name": "data", "emptyDir": {}}]}}, "pod.volumes[0].name", "platform"),
        ({"pod": {"volumes": [{"name": "tfk-shm", "emptyDir": {}}]}}, "pod.volumes[0].name", "platform"),
        ({"pod": {"volumes": [{"name": "s", "secret": {}}]}}, "pod.volumes[0].secret.secretName", "required"),
        (
            {
                "pod": {
                    "volumes": [{"name": "v", "emptyDir": {}}],
                    "volume_mounts": [{"name": "v", "mountPath": "/tfk/x"}],
                }
            },
            "pod.volume_mounts[0].mountPath",
            "platform",
        ),
        (
            {"pod": {"volume_mounts": [{"name": "v", "mountPath": "rel"}]}},
            "pod.volume_mounts[0].mountPath",
            "absolute",
        ),
        ({"pod": {"volume_mounts": [{"name": "nope", "mountPath": "/x"}]}}, "pod.volume_mounts", "no volume"),
        (
            {
                "pod": {
                    "shm_size": "1Gi",
                    "volumes": [{"name": "v", "emptyDir": {}}],
                    "volume_mounts": [{"name": "v", "mountPath": "/dev/shm"}],
                }
            },
            "worker.pod.volume_mounts",
            "shm_size",
        ),
        ({"pod": {"shm_size": "lots"}}, "pod.shm_size", ""),
        (
            {"pod": {"env_from": [{"secretRef": {"name": "s"}, "configMapRef": {"name": "c"}}]}},
            "pod.env_from[0]",
            "exactly one",
        ),
        (
            {"pod": {"env_from": [{"secretRef": {"name": "s"}, "prefix": "TFK_"}]}},
            "pod.env_from[0].prefix",
            "reserved",
        ),
        (
            {"pod": {"env_value_from": {"TFK_ROLE": {"fieldRef": {"fieldPath": "x"}}}}},
            "pod.env_value_from.TFK_ROLE",
            "reserved",
        ),
        ({"pod": {"env_value_from": {"PW": {"value": "hunter2"}}}}, "pod.env_value_from.PW", "exactly one"),
        (
            {
                "env": {"PW": "x"},
                "pod": {"env_value_from": {"PW": {"secretKeyRef": {"name": "s", "key": "k"}}}},
            },
            "worker.pod.env_value_from.PW",
            "also set in env",
        ),
        (
            {"pod": {"labels": {"tfk.airflow.apache.org/role": "ps"}}},
            "pod.labels.tfk.airflow.apache.org/role",
            "reserved",
        ),
        (
            {"pod": {"labels": {"app.kubernetes.io/name": "x"}}},
            "pod.labels.app.kubernetes.io/name",
            "reserved",
        ),
        (
            {"pod": {"annotations": {"tfk.airflow.apache.org/spec-hash": "x"}}},
            "pod.annotations.tfk.airflow.apache.org/spec-hash",
            "reserved",
        ),
        ({"pod": {"service_account": "x"}}, "pod.service_account", "<role>.pod.service_account"),
        ({"pod": {"priority_class": "Not_A_Name"}}, "pod.priority_class", "PriorityClass"),
        ({"pod": {"affinity": ["x"]}}, "pod.affinity", "mapping"),
        ({"pod": {"affinity": {"a": float("nan")}}}, "pod.affinity.a", "plain data"),
        ({"pod": {"unknown": 1}}, "pod.unknown", "unknown key"),
        (
            {
                "worker": {
                    "replicas": 1,
                    "pod": {
                        "template_patch": {
                            "spec": {"containers": [{"name": "tensorflow", "ports": [{"containerPort": 1}]}]}
                        }
                    },
                }
            },
            "worker.pod.template_patch.spec.containers[0].ports",
            "TF port",
        ),
        (
            {
                "worker": {
                    "replicas": 1,
                    "pod": {
                        "template_patch": {"metadata": {"labels": {"tfk.airflow.apache.org/cluster": "x"}}}
                    },
                }
            },
            "worker.pod.template_patch.metadata.labels",
            "pod.labels",
        ),
        (
            {"worker": {"replicas": 1, "pod": {"template_patch": {"spec": {"restartPolicy": "OnFailure"}}}}},
            "worker.pod.template_patch.spec.restartPolicy",
            "Never",
        ),
        (
            {
                "pod": {
                    "sidecars": [{"name": "a", "image": "x"}],
                    "init_containers": [{"name": "a", "image": "y"}],
                }
            },
            "worker.pod.sidecars",
            "both name",
        ),
    ],
)
def test_a_field_that_breaks_the_contract_is_refused_naming_it(changes: dict, field: str, words: str) -> None:
    err = refused({**BASE, **changes})
    assert err.field == field, err
    assert words in err.rule


def test_every_error_of_the_pod_rules_is_reported_at_once() -> None:
    with pytest.raises(SpecErrors) as info:
        spec(
            pod={"priority_class": "Bad_", "sidecars": [{"name": "tensorflow", "image": "x"}]},
            worker={"replicas": 1, "pod": {"template_patch": {"spec": {"subdomain": "x"}}}},
        )
    fields = {e.field for e in info.value.errors}
    assert {
        "pod.priority_class",
        "pod.sidecars[0].name",
        "worker.pod.template_patch.spec.subdomain",
    } <= fields


def test_template_dir_is_a_field_so_operators_and_training_files_can_set_it() -> None:
    assert spec(template_dir="/opt/templates").template_dir == "/opt/templates"
    assert refused({**BASE, "template_dir": "a\nb"}).field == "template_dir"


def _spellings(path: str) -> list[str]:
    """Ways to write ``path`` that the kubelet resolves to it."""
    head, _, tail = path.strip("/").partition("/")
    out = [f"//{head}/{tail}", f"/{head}//{tail}", f"/./{head}/{tail}", f"/{head}/./{tail}", f"{path}/"]
    out += [f"///{head}/{tail}//", f"/{head}/{tail}/.", f"/{head}/./././{tail}"]
    return [p.replace("//.", "/.") if p.endswith("//.") else p for p in out]


PLATFORM_SPELLINGS = [p for root in ("/tfk/home", "/tmp/x", "/tfk") for p in _spellings(root + "/y")]
PLATFORM_SPELLINGS += ["//tfk", "/tfk/", "//tmp", "/./tfk", "/tfk/."]


@pytest.mark.parametrize("mount", PLATFORM_SPELLINGS)
def test_every_spelling_of_a_platform_mount_is_refused(mount: str) -> None:
    """``//tfk/home`` passed the platform-mount rule: paths are normalised before it."""
    pod = {"volumes": [{"name": "v", "emptyDir": {}}], "volume_mounts": [{"name": "v", "mountPath": mount}]}
    with pytest.raises(SpecError) as err:
        TFClusterSpec.from_dict({**BASE, "pod": pod})
    assert "pod.volume_mounts[0].mountPath" in str(err.value) and "platform" in str(err.value)


@pytest.mark.parametrize("second", ["/etc/x/", "//etc/x", "/etc/./x", "/etc//x"])
def test_one_path_spelled_twice_is_mounted_twice(second: str) -> None:
    mounts = [{"name": "v", "mountPath": "/etc/x"}, {"name": "v", "mountPath": second}]
    pod = {"volumes": [{"name": "v", "emptyDir": {}}], "volume_mounts": mounts}
    with pytest.raises(SpecError) as err:
        TFClusterSpec.from_dict({**BASE, "pod": pod})
    assert "mounted twice" in str(err.value)
