"""The pod template patch: Kubernetes' strategic merge semantics, and what it may not touch."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.pod_patch import apply_patch, check_patch

BASE = {
    "metadata": {"labels": {"tfk.airflow.apache.org/role": "worker"}},
    "spec": {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "tensorflow",
                "image": "img",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "volumeMounts": [{"name": "tfk-tmp", "mountPath": "/tmp"}],
            }
        ],
        "volumes": [{"name": "tfk-tmp", "emptyDir": {}}],
        "dnsConfig": {"options": [{"name": "ndots", "value": "5"}]},
    },
}


def test_lists_with_a_merge_key_merge_item_by_item() -> None:
    patched = apply_patch(
        BASE,
        {
            "spec": {
                "containers": [
                    {
                        "name": "tensorflow",
                        "workingDir": "/w",
                        "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                    }
                ],
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}],
            }
        },
    )
    main = patched["spec"]["containers"][0]
    assert main["image"] == "img" and main["workingDir"] == "/w"
    assert main["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "3"},
        {"name": "C", "value": "4"},
    ]
    assert main["volumeMounts"] == BASE["spec"]["containers"][0]["volumeMounts"]
    assert patched["spec"]["hostAliases"] == [{"ip": "10.0.0.1", "hostnames": ["a"]}]
    assert BASE["spec"]["containers"][0].get("workingDir") is None  # the base is not changed


def test_lists_without_a_merge_key_are_replaced_and_null_removes() -> None:
    patched = apply_patch(
        BASE, {"spec": {"dnsConfig": {"options": [{"name": "edns0"}], "searches": ["x"]}, "volumes": None}}
    )
    assert patched["spec"]["dnsConfig"] == {"options": [{"name": "edns0"}], "searches": ["x"]}
    assert "volumes" not in patched["spec"]


def test_delete_and_replace_directives() -> None:
    patched = apply_patch(
        BASE,
        {
            "spec": {
                "containers": [{"name": "tensorflow", "env": [{"name": "A", "$patch": "delete"}]}],
                "dnsConfig": {"$patch": "replace", "nameservers": ["1.1.1.1"]},
            }
        },
    )
    assert patched["spec"]["containers"][0]["env"] == [{"name": "B", "value": "2"}]
    assert patched["spec"]["dnsConfig"] == {"nameservers": ["1.1.1.1"]}
    gone = apply_patch(BASE, {"spec": {"dnsConfig": {"$patch": "delete"}}})
    assert "dnsConfig" not in gone["spec"]


OK = {
    "spec": {"containers": [{"name": "tensorflow", "lifecycle": {}}], "dnsPolicy": "None", "hostAliases": []}
}


def test_a_patch_of_what_no_field_names_is_accepted() -> None:
    assert check_patch(OK, "worker.pod.template_patch") == OK


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"spec": {"restartPolicy": "Always"}}, "spec.restartPolicy", "podFailurePolicy"),
        ({"spec": {"subdomain": "x"}}, "spec.subdomain", "DNS name"),
        ({"spec": {"hostNetwork": True}}, "spec.hostNetwork", "TF port"),
        ({"metadata": {"labels": {"tfk.airflow.apache.org/role": "ps"}}}, "metadata.labels", "pod.labels"),
        ({"metadata": {"name": "x"}}, "metadata.name", "names the pod"),
        ({"spec": {"priorityClassName": "x"}}, "spec.priorityClassName", "pod.priority_class"),
        ({"spec": {"volumes": [{"name": "x"}]}}, "spec.volumes", "pod.volumes"),
        (
            {"spec": {"containers": [{"name": "tensorflow", "ports": []}]}},
            "spec.containers[0].ports",
            "TF port",
        ),
        (
            {"spec": {"containers": [{"name": "tensorflow", "command": ["sh"]}]}},
            "spec.containers[0].command",
            "",
        ),
        (
            {"spec": {"containers": [{"name": "tensorflow", "image": "x"}]}},
            "spec.containers[0].image",
            "image",
        ),
        ({"spec": {"containers": [{"name": "agent", "image": "x"}]}}, "spec.containers[0].name", "sidecars"),
        (
            {"spec": {"containers": [{"name": "tensorflow", "$patch": "delete"}]}},
            "spec.containers[0].$patch",
            "",
        ),
        ({"spec": {"$patch": "replace"}}, "spec.$patch", "replace"),
        ({"spec": {"$retainKeys": ["a"]}}, "spec.$retainKeys", "does not support"),
        (
            {"spec": {"$setElementOrder/containers": []}},
            "spec.$setElementOrder/containers",
            "does not support",
        ),
        ({"status": {}}, "status", "not a field of a pod template"),
    ],
)
def test_a_patch_that_breaks_the_contract_is_refused_naming_it(patch: dict, field: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        check_patch(patch, "worker.pod.template_patch")
    assert info.value.field == f"worker.pod.template_patch.{field}"
    assert words in info.value.rule
