"""TFClusterSpec validation: every rule fails before anything is created, naming its field."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.cluster import Mode, RoleSpec, TFClusterSpec, quantity_value
from tests.helpers import IMAGENET

BASE = IMAGENET


def spec_with(**changes):
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is ...:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def error_of(data) -> SpecError:
    with pytest.raises(SpecError) as info:
        TFClusterSpec.from_dict(data)
    return info.value


def test_minimal_spec_and_defaults():
    spec = TFClusterSpec.from_dict(BASE)
    assert spec.mode is Mode.BETWEEN_GRAPH
    assert spec.port == 2222 and spec.namespace_name == "default"
    assert list(spec.roles()) == ["ps", "worker"]
    assert spec.task_count() == 5
    assert spec.command == ("python", "/opt/imagenet.py")
    assert spec.permanent_exit_codes == (1, 2, 126, 127)


def test_to_dict_round_trips():
    data = spec_with(
        chief={"replicas": 1},
        mode="parameter_server",
        env={"A": "1"},
        storage={"data": {"size": "1Gi"}, "storage_class": "fast"},
    )
    spec = TFClusterSpec.from_dict(data)
    assert TFClusterSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(
    "changes, field",
    [
        # names
        ({"name": "ImageNet"}, "name"),
        ({"name": "1net"}, "name"),
        ({"name": "a_b"}, "name"),
        ({"name": "a\nb"}, "name"),
        ({"name": "a" * 64}, "name"),
        ({"name": 123}, "name"),
        ({"name": "x" * 55}, "name"),  # fits alone, but x...-worker-2 exceeds 63
        ({"namespace": "Bad NS"}, "namespace"),
        ({"namespace": "a" * 60, "namespace_per_training": True}, "namespace"),
        ({"namespace_per_training": "yes"}, "namespace_per_training"),
        # required fields
        ({"name": ...}, "name"),
        ({"image": ...}, "image"),
        ({"command": ...}, "command"),
        ({"command": []}, "command"),
        ({"worker": ...}, "worker"),
        ({"worker": None}, "worker"),
        # image and command
        ({"image": "tf:2\n---"}, "image"),
        ({"image": "tf {{ x }}"}, "image"),
        ({"image": "tf 2"}, "image"),
        ({"command": "python train.py"}, "command"),
        ({"command": ["python", {"a": 1}]}, "command[1]"),
        ({"args": ["a\x00b"]}, "args[0]"),
        # a value with no command-line spelling (a Param rendered natively into args)
        ({"args": ["--lr", None]}, "args[1]"),
        ({"args": ["--debug", True]}, "args[1]"),
        ({"args": ["--sizes", [1, 2]]}, "args[1]"),
        ({"args": ["--opts", {"a": 1}]}, "args[1]"),
        ({"worker": {"replicas": 1, "args": [None]}}, "worker.args[0]"),
        ({"command": ["python", None]}, "command[1]"),
        # replicas
        ({"worker": {"replicas": 0}}, "worker.replicas"),
        ({"worker": {"replicas": -1}}, "worker.replicas"),
        ({"worker": {"replicas": "3"}}, "worker.replicas"),
        ({"worker": {"replicas": True}}, "worker.replicas"),
        ({"worker": {"replicas": 10_001}}, "worker.replicas"),
        ({"ps": {"replicas": 0}}, "ps.replicas"),
        ({"chief": {"replicas": 2}, "mode": "parameter_server"}, "chief.replicas"),
        ({"evaluator": {"replicas": 2}}, "evaluator.replicas"),
        ({"worker": 3}, "worker"),
        # mode versus roles
        ({"mode": "async"}, "mode"),
        ({"ps": ...}, "ps"),
        ({"mode": "parameter_server"}, "chief"),
        ({"mode": "parameter_server", "chief": {"replicas": 1}, "ps": ...}, "ps"),
        ({"mode": "all_reduce"}, "ps"),
        # parameter_server: the PS write the chief's checkpoints, so the models volume is shared
        (
            {
                "mode": "parameter_server",
                "chief": {"replicas": 1},
                "storage": {"models": {"size": "1Gi", "access_mode": "ReadWriteOnce"}},
            },
            "storage.models.access_mode",
        ),
        # quantities
        ({"worker": {"resources": {"cpu": "lots"}}}, "worker.resources.cpu"),
        ({"worker": {"resources": {"memory": "2GB"}}}, "worker.resources.memory"),
        ({"worker": {"resources": {"memory": "-1Gi"}}}, "worker.resources.memory"),
        ({"worker": {"resources": {"cpu": 0}}}, "worker.resources.cpu"),
        ({"worker": {"resources": {"cpu": True}}}, "worker.resources.cpu"),
        (
            {"worker": {"resources": {"memory": "4Gi", "memory_limit": "2Gi"}}},
            "worker.resources.memory_limit",
        ),
        ({"worker": {"resources": {"cpu": "2", "cpu_limit": "500m"}}}, "worker.resources.cpu_limit"),
        ({"worker": {"resources": {"gpus": -1}}}, "worker.resources.gpus"),
        (
            {"worker": {"resources": {"gpus": 1, "gpu_resource": "bad resource"}}},
            "worker.resources.gpu_resource",
        ),
        ({"worker": {"resources": {"gpus": 1, "gpu_resource": 5}}}, "worker.resources.gpu_resource"),
        ({"storage": {"data": {"size": "ten"}}}, "storage.data.size"),
        # unknown keys, top level and nested
        ({"replicas": 3}, "replicas"),
        ({"worker": {"replica": 3}}, "worker.replica"),
        ({"worker": {"resources": {"gpu": 1}}}, "worker.resources.gpu"),
        ({"worker": {"tolerations": [{"key": "a", "operater": "Exists"}]}}, "worker.tolerations[0].operater"),
        ({"storage": {"data": {"size": "1Gi", "mount": "/x"}}}, "storage.data.mount"),
        ({"storage": {"cache": {"size": "1Gi"}}}, "storage.cache"),
        # env and labels
        ({"env": {"TF_CONFIG": "{}"}}, "env.TF_CONFIG"),
        ({"env": {"TFK_ROLE": "ps"}}, "env.TFK_ROLE"),
        ({"worker": {"replicas": 1, "env": {"TFK_INDEX": "0"}}}, "worker.env.TFK_INDEX"),
        ({"ps": {"env": {"TF_CONFIG": "{}"}}}, "ps.env.TF_CONFIG"),
        ({"env": {"1BAD": "x"}}, "env.1BAD"),
        ({"env": {"A": "a\x00b"}}, "env.A"),
        ({"env": {"A": ["list"]}}, "env.A"),
        ({"env": ["A=1"]}, "env"),
        ({"labels": {"team": "a b"}}, "labels.team"),
        ({"labels": {"bad key!": "x"}}, "labels.bad key!"),
        ({"labels": {"app.kubernetes.io/name": "x"}}, "labels.app.kubernetes.io/name"),
        ({"labels": {"tfk.airflow.apache.org/cluster": "x"}}, "labels.tfk.airflow.apache.org/cluster"),
        ({"worker": {"node_selector": {"zone": "a:b"}}}, "worker.node_selector.zone"),
        # tolerations
        ({"worker": {"tolerations": [{"key": "g", "operator": "Like"}]}}, "worker.tolerations[0].operator"),
        ({"worker": {"tolerations": [{"key": "g", "effect": "Never"}]}}, "worker.tolerations[0].effect"),
        (
            {"worker": {"tolerations": [{"key": "g", "operator": "Exists", "value": "x"}]}},
            "worker.tolerations[0].value",
        ),
        ({"worker": {"tolerations": [{"effect": "NoSchedule"}]}}, "worker.tolerations[0].operator"),
        ({"worker": {"tolerations": [{"key": "g", "value": 1}]}}, "worker.tolerations[0].value"),
        (
            {"worker": {"tolerations": [{"key": "g", "value": "x", "toleration_seconds": 5}]}},
            "worker.tolerations[0].toleration_seconds",
        ),
        ({"worker": {"tolerations": "gpu"}}, "worker.tolerations"),
        # storage
        ({"storage": {"data": {}}}, "storage.data"),
        ({"storage": {"data": {"size": "1Gi", "claim": "c"}}}, "storage.data.claim"),
        ({"storage": {"data": {"claim": "Bad_Claim"}}}, "storage.data.claim"),
        ({"storage": {"data": {"claim": 42}}}, "storage.data.claim"),
        ({"storage": {"data": {"size": "1Gi", "access_mode": "RWX"}}}, "storage.data.access_mode"),
        ({"storage": {"storage_class": "Fast SSD"}}, "storage.storage_class"),
        # cluster-wide scalars
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"image_pull_policy": "Sometimes"}, "image_pull_policy"),
        ({"image_pull_secrets": ["Bad Secret"]}, "image_pull_secrets[0]"),
        ({"image_pull_secrets": "regcred"}, "image_pull_secrets"),
        ({"service_account": "Bad SA"}, "service_account"),
        ({"service_account": 7}, "service_account"),
        ({"max_duration_seconds": 0}, "max_duration_seconds"),
        ({"retries_per_index": -1}, "retries_per_index"),
        ({"permanent_exit_codes": [0]}, "permanent_exit_codes[0]"),
        ({"permanent_exit_codes": [256]}, "permanent_exit_codes[0]"),
        ({"permanent_exit_codes": "1,2"}, "permanent_exit_codes"),
        ({"ps_grace_seconds": -5}, "ps_grace_seconds"),
        ({"legacy_tf1_flags": "yes"}, "legacy_tf1_flags"),
    ],
)
def test_invalid_spec_names_its_field(changes, field):
    err = error_of(spec_with(**changes))
    assert err.field == field, str(err)
    assert str(err).startswith(f"{field}: ")


def test_unknown_key_error_lists_the_allowed_keys():
    err = error_of(spec_with(wokers={"replicas": 2}))
    assert err.field == "wokers" and "worker" in err.rule


def test_too_long_name_error_shows_the_generated_name():
    err = error_of(spec_with(name="n" * 53, worker={"replicas": 1000}))
    assert err.field == "name" and "worker-999" in err.rule


def test_name_length_limit_counts_replicas():
    # 52 + len("-worker-999") = 63 fits; 52 + len("-worker-1000") = 64 does not.
    TFClusterSpec.from_dict(spec_with(name="n" * 52, mode="all_reduce", ps=..., worker={"replicas": 1000}))
    err = error_of(spec_with(name="n" * 52, mode="all_reduce", ps=..., worker={"replicas": 1001}))
    assert err.field == "name"


def test_the_ps_name_is_bounded_by_its_hostname_only():
    # The PS is an Indexed Job: its pods' hostname <name>-ps-<i> is the longest name it
    # makes.
    spec = TFClusterSpec.from_dict(spec_with(name="n" * 54, worker={"replicas": 1}, ps={"replicas": 1}))
    assert len(f"{spec.name}-worker-0") == 63
    err = error_of(spec_with(name="n" * 55, worker={"replicas": 1}))
    assert err.field == "name" and "task hostname" in err.rule


@pytest.mark.parametrize(
    "text",
    [
        "name: [unclosed",
        "name: a\n  bad: indentation\n nope",
        "\tname: tab",
        "key: value: another",
    ],
)
def test_malformed_yaml_is_a_spec_error(text):
    with pytest.raises(SpecError) as info:
        TFClusterSpec.from_yaml(text)
    assert info.value.field == "spec"


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just text", "42"])
def test_yaml_that_is_not_a_mapping_is_a_spec_error(text):
    with pytest.raises(SpecError) as info:
        TFClusterSpec.from_yaml(text)
    assert info.value.field == "spec"


def test_yaml_anchors_and_tags_are_refused():
    text = "name: imagenet\nimage: tf:2\ncommand: [python, x.py]\nps: &role {replicas: 2}\nworker: *role\n"
    with pytest.raises(SpecError, match="alias") as info:
        TFClusterSpec.from_yaml(text)
    assert info.value.field == "worker" and info.value.line == 5
    with pytest.raises(SpecError):
        TFClusterSpec.from_yaml("name: !!python/object/apply:os.system ['true']\n")


@pytest.mark.parametrize(
    "mode, roles",
    [
        ("between_graph", {"ps": {"replicas": 1}, "worker": {"replicas": 2}}),
        ("between_graph", {"ps": {"replicas": 1}, "worker": {"replicas": 2}, "evaluator": {"replicas": 1}}),
        ("parameter_server", {"chief": {"replicas": 1}, "ps": {"replicas": 2}, "worker": {"replicas": 4}}),
        ("all_reduce", {"worker": {"replicas": 4}}),
        ("all_reduce", {"chief": {"replicas": 1}, "worker": {"replicas": 4}}),
    ],
)
def test_valid_mode_role_combinations(mode, roles):
    data = spec_with(mode=mode, ps=...)
    data.update(roles)
    spec = TFClusterSpec.from_dict(data)
    assert spec.mode is Mode(mode)
    assert "evaluator" not in spec.cluster_roles()


def test_quantities_are_normalised_and_compared():
    spec = TFClusterSpec.from_dict(
        spec_with(worker={"resources": {"cpu": 1.5, "memory": "2Gi", "memory_limit": "2048Mi", "gpus": 2}})
    )
    res = spec.worker.resources
    assert res.requests == {"cpu": "1.5", "memory": "2Gi"}
    assert res.limits == {"memory": "2048Mi", "nvidia.com/gpu": "2"}
    assert quantity_value("500m") == 0.5 and quantity_value("1Ki") == 1024
    assert quantity_value("1e3") == 1000 and quantity_value("2G") == 2e9


def test_memory_limit_defaults_to_request():
    spec = TFClusterSpec.from_dict(spec_with(worker={"resources": {"memory": "1Gi"}}))
    assert spec.worker.resources.limits == {"memory": "1Gi"}


def test_exit_codes_are_sorted_and_deduplicated():
    spec = TFClusterSpec.from_dict(spec_with(permanent_exit_codes=[127, 1, 1]))
    assert spec.permanent_exit_codes == (1, 127)


def test_direct_construction_validates_too():
    with pytest.raises(SpecError) as info:
        TFClusterSpec(
            name="ok", image="tf:2", command=("python",), worker=RoleSpec(replicas=0), ps=RoleSpec()
        )
    assert info.value.field == "worker.replicas"
    spec = TFClusterSpec(
        name="ok", image="tf:2", command=("python",), worker=RoleSpec(replicas=2), ps=RoleSpec()
    )
    with pytest.raises(SpecError) as info:
        dataclasses.replace(spec, namespace="Nope")
    assert info.value.field == "namespace"


def test_namespace_per_training_uses_its_own_namespace():
    spec = TFClusterSpec.from_dict(spec_with(namespace="ml", namespace_per_training=True))
    assert spec.namespace_name == "ml-imagenet"


def test_spec_error_message_shows_the_value():
    err = error_of(spec_with(worker={"replicas": -1}))
    assert str(err) == "worker.replicas: must be between 1 and 10000 (got -1)"


# Labels the provider sets or selects on, or that Kubernetes and its add-ons (Job, JobSet,
# Kueue) own: a user label there would override queue_name or a controller's selector.
@pytest.mark.parametrize(
    "key",
    [
        "kueue.x-k8s.io/queue-name",
        "kueue.x-k8s.io/priority-class",
        "kueue.x-k8s.io/anything",
        "cluster.x-k8s.io/cluster-name",
        "jobset.sigs.k8s.io/jobset-name",
        "batch.kubernetes.io/job-completion-index",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/anything",
        "tfk.airflow.apache.org/cluster",
        "tfk.airflow.apache.org/new-label",
        "sub.tfk.airflow.apache.org/x",
    ],
)
def test_labels_of_the_platform_kubernetes_and_its_add_ons_are_reserved(key):
    err = error_of(spec_with(labels={key: "x"}))
    assert err.field == f"labels.{key}"
    assert "reserved" in str(err)


def test_a_user_label_cannot_override_queue_name():
    err = error_of(spec_with(queue_name="team-a", labels={"kueue.x-k8s.io/queue-name": "other"}))
    assert err.field == "labels.kueue.x-k8s.io/queue-name"


@pytest.mark.parametrize("key", ["example.com/team", "team", "notk8s.io/x", "my-x-k8s.io.example.com/y"])
def test_other_domains_stay_the_users(key):
    assert TFClusterSpec.from_dict(spec_with(labels={key: "x"})).labels[key] == "x"


# IsEnvVarName of the API servers before 1.32 (the oldest the provider supports is 1.29)
# refuses '.', '..' and names starting with '..'; a trailing newline is no name at all.
@pytest.mark.parametrize("name", [".", "..", "..x", "...", "A\n", "A B", "A=B", ""])
def test_env_names_every_supported_api_server_refuses(name):
    err = error_of(spec_with(env={name: "v"}))
    assert err.field.startswith("env")
    err = error_of(spec_with(worker={"replicas": 1, "env": {name: "v"}}))
    assert err.field.startswith("worker.env")


@pytest.mark.parametrize("name", [".x", "x.", "a..b", "-x", "_", "my.env-name"])
def test_env_names_every_supported_api_server_admits(name):
    assert TFClusterSpec.from_dict(spec_with(env={name: "v"})).env[name] == "v"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("labels", {"team": "x\n"}),
        ("labels", {"team\n": "x"}),
        ("image_pull_secrets", ["secret\n"]),
        ("service_account", "sa\n"),
        ("queue_name", "q\n"),
        ("metrics_path", "/metrics\n"),
    ],
)
def test_a_trailing_newline_is_not_a_valid_name(field, value):
    err = error_of(spec_with(**{field: value}))
    assert err.field.startswith(field)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"args": ["x"] * 1_000_000}, "args"),
        ({"command": ["x"] * 1_000_000}, "command"),
        ({"args": ["x" * 100_000] * 4}, "args"),
        ({"env": {f"V{i}": "x" for i in range(200_000)}}, "env"),
        ({"labels": {f"l{i}": "x" for i in range(200_000)}}, "labels"),
        ({"image_pull_secrets": ["s"] * 1_000_000}, "image_pull_secrets"),
        ({"permanent_exit_codes": [1] * 1_000_000}, "permanent_exit_codes"),
        ({"worker": {"replicas": 1, "args": ["x"] * 1_000_000}}, "worker.args"),
        (
            {"worker": {"replicas": 1, "tolerations": [{"operator": "Exists"}] * 1_000_000}},
            "worker.tolerations",
        ),
        (
            {"worker": {"replicas": 1, "node_selector": {f"k{i}": "v" for i in range(200_000)}}},
            "worker.node_selector",
        ),
    ],
)
def test_huge_collections_are_refused_before_their_items_are_checked(changes, field):
    import time

    data = spec_with(**changes)
    t0 = time.process_time()
    err = error_of(data)
    spent = time.process_time() - t0
    assert err.field == field
    assert spent < 0.25, f"{spent:.2f} CPU-s"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mode": "all_reduce", "max_lost_workers": 1}, "parameter_server mode only"),
        ({"max_lost_workers": 3}, "less than worker.replicas"),
        ({"max_lost_workers": -1}, "max_lost_workers"),
    ],
)
def test_max_lost_workers_is_checked(fields, message):
    base = {
        "name": "c",
        "image": "tf:2",
        "command": ["python", "t.py"],
        "mode": "parameter_server",
        "ps": {"replicas": 1},
        "worker": {"replicas": 3},
        "chief": {"replicas": 1},
        "storage": {"models": {"size": "1Gi"}},
    }
    if fields.get("mode") == "all_reduce":
        base = {k: v for k, v in base.items() if k not in ("ps", "chief")}
    with pytest.raises(SpecError) as err:
        TFClusterSpec.from_dict({**base, **fields})
    assert err.value.field == "max_lost_workers" and message in str(err.value)


@pytest.mark.parametrize("volume", ["data", "logs", "models"])
def test_an_existing_claim_cannot_follow_a_training_into_its_own_namespace(volume):
    # a PVC binds its PV to its own namespace alone: refused naming both fields
    err = error_of(spec_with(namespace_per_training=True, storage={volume: {"claim": "shared"}}))
    assert err.field == f"storage.{volume}.claim"
    assert "namespace_per_training" in str(err) and f"storage.{volume}.size" in str(err)
    own = TFClusterSpec.from_dict(spec_with(namespace_per_training=True, storage={volume: {"size": "1Gi"}}))
    assert getattr(own.storage, volume).claim is None  # a claim of its own is fine


def test_cluster_queue_needs_an_own_namespace_and_a_queue():
    for changes in ({}, {"namespace_per_training": True}, {"queue_name": "lq"}):
        assert error_of(spec_with(cluster_queue="cq", **changes)).field == "cluster_queue"
    ok = spec_with(cluster_queue="cq", namespace_per_training=True, queue_name="lq")
    assert TFClusterSpec.from_dict(ok).cluster_queue == "cq"
