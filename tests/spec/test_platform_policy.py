"""The platform policy: the Pod Security checks as upstream writes them (examples taken from
k8s.io/pod-security-admission's own tests), their versions, the platform's rules beyond
them, every violation named with its field and rule, and a policy only the platform's
configuration sets."""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError, SpecErrors
from airflow_tfk.spec import platform_policy as pp
from airflow_tfk.spec import pod_security
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.platform_policy import (
    Level,
    PlatformPolicy,
    PolicyConfigError,
    check_manifests,
    check_pod_security,
    check_pod_template,
    check_template_patch,
    namespace_labels,
    pod_security_detail,
    raise_for,
)

HARDENED = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    meta = spec.pop("metadata", {})
    return {"metadata": meta, "spec": {"containers": list(containers), **spec}}


def c(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "registry.example/x:1", **fields}


def sc(**fields: Any) -> dict[str, Any]:
    return {**HARDENED, **fields}


# -- upstream's own examples (policy/check_*_test.go, v0.37.2) ---------------------------
UPSTREAM = [
    (
        "baseline",
        pod(
            c("a", ports=[{"hostPort": 0}]),
            c("b", ports=[{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 20}]),
            c("c", ports=[{"hostPort": 0}, {"hostPort": 10}, {"hostPort": 30}]),
        ),
        'hostPort (containers "b", "c" use hostPorts 10, 20, 30)',
    ),
    (
        "baseline",
        pod(
            c("a", securityContext={"seLinuxOptions": {"type": "container_t"}}),
            c("d", securityContext={"seLinuxOptions": {"type": "container_engine_t"}}),
            c("e", securityContext={"seLinuxOptions": {"type": "bar"}}),
            c("f", securityContext={"seLinuxOptions": {"user": "bar"}}),
            c("g", securityContext={"seLinuxOptions": {"role": "baz"}}),
            securityContext={"seLinuxOptions": {"type": "foo", "user": "bar", "role": "baz"}},
        ),
        'seLinuxOptions (pod and containers "e", "f", "g" set forbidden securityContext.seLinuxOptions: '
        'types "bar", "foo"; user may not be set; role may not be set)',
    ),
    (
        "baseline",
        pod(
            metadata={
                "annotations": {
                    "container.apparmor.security.beta.kubernetes.io/": "bogus",
                    "container.apparmor.security.beta.kubernetes.io/a": "",
                    "container.apparmor.security.beta.kubernetes.io/b": "runtime/default",
                    "container.apparmor.security.beta.kubernetes.io/c": "localhost/",
                    "container.apparmor.security.beta.kubernetes.io/d": "localhost/foo",
                    "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
                    "container.apparmor.security.beta.kubernetes.io/f": "unknown",
                }
            }
        ),
        "forbidden AppArmor profiles (annotations must not set AppArmor profile type to "
        '"container.apparmor.security.beta.kubernetes.io/="bogus"", '
        '"container.apparmor.security.beta.kubernetes.io/e="unconfined"", '
        '"container.apparmor.security.beta.kubernetes.io/f="unknown"")',
    ),
]


@pytest.mark.parametrize("level,template,detail", UPSTREAM)
def test_upstream_examples_read_as_upstream_writes_them(level: str, template: dict, detail: str) -> None:
    assert pod_security_detail(template, level) == detail


def test_restricted_capabilities_and_volumes_as_upstream_writes_them() -> None:
    t = pod(
        c("a", securityContext={"capabilities": {"add": ["FOO", "BAR"]}}),
        c("b", securityContext={"capabilities": {"add": ["BAR", "BAZ"]}}),
        c(
            "c",
            securityContext={"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}},
        ),
    )
    found = [r for r in pod_security._results(t, "restricted", "latest") if r[0] == "capabilities_restricted"]
    assert found[0][1].detail == (
        'containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers "a", "b", "c" '
        'must not include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add'
    )
    kinds = ["hostPath", "gcePersistentDisk", "nfs", "gitRepo", "flocker", "vsphereVolume"]
    t = pod(
        c("a", securityContext=sc()),
        securityContext={},
        volumes=[
            {"name": "ok", "emptyDir": {}},
            *({"name": f"b{i}", k: {}} for i, k in enumerate(kinds)),
            {"name": "c1"},
        ],
    )
    assert pod_security_detail(t, "restricted") == (
        'restricted volume types (volumes "b0", "b1", "b2", "b3", "b4", "b5", "c1" use restricted '
        'volume types "flocker", "gcePersistentDisk", "gitRepo", "hostPath", "nfs", "unknown", '
        '"vsphereVolume")'
    )


def test_the_checks_follow_the_version_the_namespace_pins() -> None:
    rmem = pod(
        c("a", securityContext=sc()),
        securityContext={"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"}]},
    )
    assert pod_security_detail(rmem, "baseline", "latest") is None
    assert pod_security_detail(rmem, "baseline", "v1.29") == "forbidden sysctls (net.ipv4.tcp_rmem)"
    engine = pod(c("a", securityContext=sc(seLinuxOptions={"type": "container_engine_t"})))
    assert pod_security_detail(engine, "baseline", "v1.31") is None
    assert pod_security_detail(engine, "baseline", "v1.30") is not None
    root_in_userns = pod(c("a", securityContext=sc(runAsNonRoot=False, runAsUser=0)), hostUsers=False)
    assert pod_security_detail(root_in_userns, "restricted", "v1.35") is None
    assert pod_security_detail(root_in_userns, "restricted", "v1.34") == (
        'runAsNonRoot != true (container "a" must not set securityContext.runAsNonRoot=false), '
        'runAsUser=0 (container "a" must not set runAsUser=0)'
    )
    probe = pod(c("a", securityContext=sc(), livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80}}))
    assert pod_security_detail(probe, "baseline", "v1.33") is None
    assert pod_security_detail(probe, "baseline", "v1.34") is not None
    # a version newer than this module's checks reads as the newest: what an API server does
    assert pod_security_detail(rmem, "baseline", "v1.99") is None
    assert pod_security_detail(probe, "privileged") is None
    with pytest.raises(ValueError):
        pod_security_detail(probe, "baseline", "1.x")


def test_the_api_server_sees_a_host_network_pod_with_its_ports_on_the_host() -> None:
    t = pod(c("a", securityContext=sc(), ports=[{"containerPort": 2222}]), hostNetwork=True)
    assert pod_security_detail(t, "baseline") == (
        'host namespaces (hostNetwork=true), hostPort (container "a" uses hostPort 2222)'
    )
    assert [v.field for v in check_pod_security(t, "baseline", where="w.template")] == [
        "w.template.spec.hostNetwork",
        "w.template.spec.containers[0].ports[0].hostPort",
    ]


def test_an_apparmor_annotation_becomes_the_containers_profile() -> None:
    key = "container.apparmor.security.beta.kubernetes.io/a"
    t = pod(c("a", securityContext=sc()), metadata={"annotations": {key: "unconfined"}})
    assert pod_security_detail(t, "baseline") == (
        'forbidden AppArmor profiles (container "a" and annotation must not set AppArmor profile type to '
        f'"Unconfined", "{key}="unconfined"")'
    )
    fields = {v.field for v in check_pod_security(t, "baseline")}
    assert fields == {f"metadata.annotations['{key}']"}


def test_every_violation_is_named_not_only_the_first() -> None:
    t = pod(
        c("a", securityContext={"privileged": True, "runAsUser": 0}),
        c("b", securityContext=sc(capabilities={"add": ["SYS_ADMIN", "NET_RAW"], "drop": ["ALL"]})),
        hostPID=True,
        hostIPC=True,
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    )
    found = {(v.field, v.rule) for v in check_pod_security(t, "restricted", where="worker.template")}
    assert {
        ("worker.template.spec.containers[0].securityContext.privileged", "pod-security/privileged"),
        ("worker.template.spec.containers[0].securityContext.runAsUser", "pod-security/runAsUser"),
        (
            "worker.template.spec.containers[1].securityContext.capabilities.add[0]",
            "pod-security/capabilities_restricted",
        ),
        (
            "worker.template.spec.containers[1].securityContext.capabilities.add[1]",
            "pod-security/capabilities_restricted",
        ),
        ("worker.template.spec.hostPID", "pod-security/hostNamespaces"),
        ("worker.template.spec.hostIPC", "pod-security/hostNamespaces"),
        ("worker.template.spec.volumes[0].hostPath", "pod-security/restrictedVolumes"),
    } <= found


# -- the platform's rules ----------------------------------------------------------------
def test_images_come_from_allowed_registries_only() -> None:
    policy = PlatformPolicy(
        allowed_image_prefixes=("registry.example", "tensorflow/tensorflow", "ghcr.io/org/")
    )
    ok = [
        "registry.example/a/b:1",
        "tensorflow/tensorflow:2.21.0",
        "docker.io/tensorflow/tensorflow@sha256:ab",
        "ghcr.io/org/x",
    ]
    bad = [
        "registry.example.evil.io/a",
        "registry.example:5000/a",
        "tensorflow/tensorflow-evil:1",
        "python:3",
        "ghcr.io/org2/x",
        "ghcr.io/orgx",
    ]
    for image in ok + bad:
        found = check_pod_template(
            pod(c("a", image=image, securityContext=sc()), automountServiceAccountToken=False), policy
        )
        assert bool(found) == (image in bad), (image, found)
    assert pp.normalize_image("python:3") == "docker.io/library/python:3"


def test_host_paths_are_none_by_default_and_normalized() -> None:
    assert pp.normalize_host_path("//tfk//home/./") == "/tfk/home"
    assert pp.normalize_host_path("/tfk/../etc") is None and pp.normalize_host_path("tfk") is None
    policy = PlatformPolicy(pod_security_level=Level.PRIVILEGED, allowed_host_paths=("/data",))

    def refused(path: str, p: PlatformPolicy = policy) -> bool:
        t = pod(
            c("a"), automountServiceAccountToken=False, volumes=[{"name": "v", "hostPath": {"path": path}}]
        )
        return any(v.rule == "platform/host-paths" for v in check_pod_template(t, p))

    assert not refused("/data") and not refused("/data/sets") and not refused("//data/sets/")
    assert (
        refused("/database") and refused("/data/../etc") and refused("/") and refused("/var/run/docker.sock")
    )
    assert refused("/data", PlatformPolicy(pod_security_level=Level.PRIVILEGED))


def test_capabilities_tokens_node_and_host_ports() -> None:
    policy = PlatformPolicy(pod_security_level=Level.PRIVILEGED, allowed_capabilities=("NET_BIND_SERVICE",))
    t = pod(
        c(
            "a",
            securityContext={"capabilities": {"add": ["net_bind_service", "CAP_SYS_ADMIN"]}},
            ports=[{"containerPort": 80, "hostPort": 80}],
        ),
        nodeName="n1",
        volumes=[{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}],
    )
    found = [(v.field, v.rule) for v in check_pod_template(t, policy, where="w")]
    assert found == [
        ("w.spec.nodeName", "platform/node-name"),
        ("w.spec.automountServiceAccountToken", "platform/service-account-token"),
        ("w.spec.containers[0].securityContext.capabilities.add[1]", "platform/capabilities"),
        ("w.spec.containers[0].ports[0].hostPort", "platform/host-ports"),
        ("w.spec.volumes[0].projected.sources[0].serviceAccountToken", "platform/service-account-token"),
    ]
    lenient = dataclasses.replace(
        policy,
        allow_node_name=True,
        allow_host_ports=True,
        allow_service_account_token=True,
        allowed_capabilities=("NET_BIND_SERVICE", "SYS_ADMIN"),
    )
    assert check_pod_template(t, lenient) == []


def test_cpu_and_memory_per_pod_count_sidecars_and_init_containers() -> None:
    policy = PlatformPolicy(max_pod_cpu="4", max_pod_memory="8Gi")

    def lim(cpu: str, mem: str) -> dict[str, Any]:
        return {"limits": {"cpu": cpu, "memory": mem}}

    t = pod(
        c("main", securityContext=sc(), resources=lim("3", "6Gi")),
        automountServiceAccountToken=False,
        initContainers=[
            c("side", securityContext=sc(), restartPolicy="Always", resources=lim("500m", "1Gi")),
            c("setup", securityContext=sc(), resources=lim("2", "512Mi")),
        ],
    )
    assert check_pod_template(t, policy) == []  # 3.5 cpu, 7Gi at most
    t["spec"]["initContainers"][0]["resources"] = lim("1500m", "1Gi")  # 4.5 cpu beside the task
    assert [(v.field, v.rule) for v in check_pod_template(t, policy)] == [
        ("spec.containers[*].resources.limits.cpu", "platform/max-pod-cpu")
    ]
    del t["spec"]["initContainers"][1]["resources"]
    fields = {v.field for v in check_pod_template(t, policy)}
    assert "spec.initContainers[1].resources.limits.memory" in fields
    t["spec"]["resources"] = {"limits": {"cpu": "2", "memory": "2Gi"}}  # pod-level limits bound it all
    assert check_pod_template(t, policy) == []
    assert pp.parse_quantity("1.5Gi") == 1.5 * 2**30 and pp.parse_quantity("250m") * 4 == 1
    with pytest.raises(ValueError):
        pp.parse_quantity("1e99999")


BASE = {
    "name": "t1",
    "image": "img",
    "command": ["python", "t.py"],
    "mode": "all_reduce",
    "worker": {"replicas": 3},
}


def _render(data: dict[str, Any]) -> list[dict[str, Any]]:
    from airflow_tfk.render.manifests import render

    return render(TFClusterSpec.from_dict(data))


@pytest.mark.parametrize("layout", ["jobs", "jobset"])
def test_replicas_and_duration_per_training(layout: str) -> None:
    data = {
        **BASE,
        "layout": layout,
        "mode": "parameter_server",
        "ps": {"replicas": 2},
        "chief": {"replicas": 1},
    }
    policy = PlatformPolicy(max_replicas=5, max_duration_seconds=3600)
    found = {(v.field, v.rule) for v in check_manifests(_render(data), policy)}
    assert ("replicas", "platform/max-replicas") in found
    assert ("worker.activeDeadlineSeconds", "platform/max-duration") in found
    found = check_manifests(_render({**data, "ps": {"replicas": 1}, "max_duration_seconds": 600}), policy)
    assert found == []


def test_the_rendered_defaults_pass_the_default_policy() -> None:
    for layout in ("jobs", "jobset"):
        assert check_manifests(_render({**BASE, "layout": layout}), PlatformPolicy()) == []


def test_a_template_patch_may_not_touch_security_settings() -> None:
    patch = {
        "spec": {
            "hostPID": True,
            "securityContext": {"runAsUser": 0},
            "containers": [{"name": "tensorflow", "securityContext": None, "workingDir": "/x"}],
            "hostAliases": [],
        }
    }
    found = [
        v.field for v in check_template_patch(patch, PlatformPolicy(), where="worker.pod.template_patch")
    ]
    assert found == [
        "worker.pod.template_patch.spec.securityContext",
        "worker.pod.template_patch.spec.hostPID",
        "worker.pod.template_patch.spec.containers[0].securityContext",
    ]
    assert check_template_patch(patch, PlatformPolicy(template_patch_may_set_security=True), where="p") == []


def test_raise_for_raises_every_violation_as_spec_errors() -> None:
    t = pod(c("a", securityContext={"privileged": True}), hostIPC=True)
    violations = check_pod_template(t, PlatformPolicy(), where="worker.template")
    with pytest.raises(SpecErrors) as info:
        raise_for(violations)
    assert len(info.value.errors) == len(violations) > 3
    assert all(
        isinstance(e, SpecError) and e.field.startswith("worker.template.spec") for e in info.value.errors
    )
    assert "[platform policy: pod-security/privileged]" in str(info.value)
    raise_for([])


# -- the policy itself ---------------------------------------------------------------------
def test_the_policy_is_read_from_the_configuration_section() -> None:
    assert PlatformPolicy.from_config({}) == PlatformPolicy()
    policy = PlatformPolicy.from_config(
        {
            "pod_security_level": "Baseline",
            "pod_security_version": "v1.29",
            "allowed_image_prefixes": " registry.example/ , ghcr.io/org/ ,",
            "allowed_host_paths": "/data",
            "allowed_capabilities": "",
            "allow_node_name": "false",
            "allow_host_ports": True,  # Airflow's getsection converts booleans and numbers
            "template_patch_may_set_security": "TRUE",
            "max_replicas": 64,
            "max_pod_cpu": "16",
            "max_pod_memory": "64Gi",
            "max_duration_seconds": "86400",
        }
    )
    assert policy.pod_security_level is Level.BASELINE and policy.pod_security_version == "v1.29"
    assert policy.allowed_image_prefixes == ("registry.example/", "ghcr.io/org/")
    assert policy.allow_host_ports and policy.template_patch_may_set_security and not policy.allow_node_name
    assert (policy.max_replicas, policy.max_duration_seconds) == (64, 86400)
    assert namespace_labels(policy) == {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "v1.29",
    }


@pytest.mark.parametrize(
    "key,value,names",
    [
        ("pod_security_levl", "restricted", "[tfk_policy] pod_security_levl"),
        ("pod_security_level", "root", "[tfk_policy] pod_security_level"),
        ("pod_security_version", "1.x", "[tfk_policy] pod_security_version"),
        ("allow_node_name", "yes", "[tfk_policy] allow_node_name"),
        ("max_replicas", "-1", "[tfk_policy] max_replicas"),
        ("max_replicas", "0", "[tfk_policy] max_replicas"),
        ("max_pod_memory", "lots", "[tfk_policy] max_pod_memory"),
        ("allowed_host_paths", "data", "[tfk_policy] allowed_host_paths"),
    ],
)
def test_a_bad_option_is_refused_naming_it(key: str, value: str, names: str) -> None:
    with pytest.raises(PolicyConfigError) as info:
        PlatformPolicy.from_config({key: value})
    assert info.value.option == names


def test_the_policy_is_frozen_and_no_spec_field_sets_it() -> None:
    policy = PlatformPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.pod_security_level = Level.PRIVILEGED  # type: ignore[misc]
    options = {f.name for f in dataclasses.fields(PlatformPolicy)}
    spec_fields = {f.name for f in dataclasses.fields(TFClusterSpec)}
    # the spec's own duration is what the policy bounds, never the bound
    assert options & spec_fields == {"max_duration_seconds"}
    for key in ("platform_policy", "policy", "pod_security_level", "allow_host_ports"):
        with pytest.raises(SpecError):
            TFClusterSpec.from_dict({**BASE, key: "privileged"})


def test_the_role_label_is_the_platforms() -> None:
    assert pp.ROLE_LABEL == naming.LABEL_ROLE


def test_the_modules_are_pure() -> None:
    """The standard library and the project's errors only: DAG parsing and the CLI load them
    without Airflow, Kubernetes or YAML."""
    allowed = {"airflow_tfk.core.errors", "airflow_tfk.spec.pod_security"}
    for module in (pp, pod_security):
        tree = ast.parse(Path(module.__file__ or "").read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                assert name in allowed or top in sys.stdlib_module_names or top == "__future__", name
