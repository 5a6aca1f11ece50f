"""The pod rules rendered: both layouts carry every field, the patch is applied, the
Kubernetes schema names what it refuses, and user strings stay data."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.backends.local import pod as _local_pod
from airflow_tfk.core.errors import SpecError, SpecErrors
from airflow_tfk.render.manifests import render
from airflow_tfk.render.schema_check import validate_manifests
from airflow_tfk.render.templating import template_dirs
from airflow_tfk.spec.cluster import TFClusterSpec
from tests.spec.test_pods import BASE, EVERY


def pod_templates(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for m in manifests:
        if m["kind"] == "Job":
            holders = [m["spec"]]
        elif m["kind"] == "JobSet":
            holders = [rj["template"]["spec"] for rj in m["spec"]["replicatedJobs"]]
        else:
            continue
        for h in holders:
            out[h["template"]["metadata"]["labels"]["tfk.airflow.apache.org/role"]] = h["template"]
    return out


WITH_PS = {
    **copy.deepcopy(EVERY),
    "mode": "parameter_server",
    "ps": {"replicas": 1},
    "chief": {"replicas": 1, "pod": {"runtime_class": "chief-runtime"}},
    "storage": {"models": {"size": "1Gi"}},
}


@pytest.mark.parametrize("layout", ["jobs", "jobset"])
def test_both_layouts_render_every_field(layout: str) -> None:
    templates = pod_templates(render(TFClusterSpec.from_dict({**WITH_PS, "layout": layout})))
    worker, ps, chief = templates["worker"], templates["ps"], templates["chief"]
    spec = worker["spec"]
    assert (
        spec["priorityClassName"] == "tfk-test-workers" and ps["spec"]["priorityClassName"] == "tfk-test-high"
    )
    assert (
        spec["runtimeClassName"] == "tfk-test-runc" and chief["spec"]["runtimeClassName"] == "chief-runtime"
    )
    assert spec["serviceAccountName"] == "worker-sa" and ps["spec"]["serviceAccountName"] == "trainer"
    assert spec["affinity"] == EVERY["pod"]["affinity"]
    # a spread constraint without a selector spreads the role's own pods
    assert spec["topologySpreadConstraints"][0]["labelSelector"] == {
        "matchLabels": {"tfk.airflow.apache.org/cluster": "t1", "tfk.airflow.apache.org/role": "worker"}
    }
    labels = worker["metadata"]["labels"]
    assert labels["team"] == "ml" and labels["tier"] == "workers"
    assert labels["tfk.airflow.apache.org/role"] == "worker"
    assert "tier" not in ps["metadata"]["labels"]
    annotations = worker["metadata"]["annotations"]
    assert annotations["example.com/role"] == "worker" and "tfk.airflow.apache.org/spec-hash" in annotations
    init = {c["name"]: c for c in spec["initContainers"]}
    assert [c["name"] for c in spec["initContainers"]] == ["prepare", "agent"]
    assert init["agent"]["restartPolicy"] == "Always" and "restartPolicy" not in init["prepare"]
    assert init["agent"]["securityContext"]["allowPrivilegeEscalation"] is False
    assert [c["name"] for c in spec["containers"]] == ["tensorflow"]
    main = spec["containers"][0]
    env = {e["name"]: e for e in main["env"]}
    assert env["DB_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "tfk-test-secret", "key": "password"}}
    assert "value" not in env["DB_PASSWORD"]  # no credential in the manifest
    assert main["envFrom"] == EVERY["pod"]["env_from"]
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    assert mounts["/etc/creds"] == "creds" and mounts["/dev/shm"] == "tfk-shm" and mounts["/tmp"] == "tfk-tmp"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tfk-shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert volumes["creds"]["secret"] == {"secretName": "tfk-test-secret"}
    # the worker's patch, on the worker's pods only
    assert spec["hostAliases"] == [{"ip": "10.1.2.3", "hostnames": ["tfk-patched.example"]}]
    assert main["workingDir"] == "/tfk/scratch"
    assert "hostAliases" not in ps["spec"]
    # and what the cluster relies on is the platform's
    assert spec["restartPolicy"] == "Never" and main["ports"][0]["containerPort"] == 2222


@pytest.mark.parametrize("layout", ["jobs", "jobset"])
def test_the_rendered_objects_are_schema_valid(layout: str) -> None:
    manifests = render(TFClusterSpec.from_dict({**WITH_PS, "layout": layout}))
    assert [f for f in validate_manifests(manifests, "1.37") if f.checked] == []


def test_without_pod_rules_the_pods_are_as_before() -> None:
    template = pod_templates(render(TFClusterSpec.from_dict(BASE)))["worker"]["spec"]
    for key in (
        "initContainers",
        "affinity",
        "priorityClassName",
        "topologySpreadConstraints",
        "hostAliases",
    ):
        assert key not in template
    assert "envFrom" not in template["containers"][0]


@pytest.mark.parametrize(
    ("pod", "field", "words"),
    [
        ({"affinity": {"nodeAfinity": {}}}, "pod.affinity", "nodeAfinity"),
        (
            {"topology_spread": [{"maxSkew": "1", "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"}]},
            "pod.topology_spread[0].maxSkew",
            "integer",
        ),
        (
            {"sidecars": [{"name": "a", "image": "x", "command": "sleep 1"}]},
            "pod.sidecars[0].command",
            "array",
        ),
        (
            {"env_from": [{"secretRef": {"name": "s", "optinal": True}}]},
            "pod.env_from[0].secretRef",
            "optinal",
        ),
    ],
)
def test_the_kubernetes_schema_names_the_field(pod: dict, field: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        render(TFClusterSpec.from_dict({**BASE, "pod": pod}))
    errors = info.value.errors if isinstance(info.value, SpecErrors) else [info.value]
    assert errors[0].field == field and words in errors[0].rule, errors


def test_a_patch_that_makes_an_invalid_pod_is_named() -> None:
    bad = {"spec": {"hostAliases": [{"ip": "10.0.0.1", "hostnames": "one"}]}}
    with pytest.raises(SpecError) as info:
        render(TFClusterSpec.from_dict({**BASE, "worker": {"replicas": 1, "pod": {"template_patch": bad}}}))
    assert info.value.field == "worker.pod.template_patch"
    assert "spec.hostAliases[0].hostnames" in info.value.rule


def test_user_strings_are_data_not_templates() -> None:
    trap = "{{ 7 * 7 }}{% raw %}$(HOME)"
    s = TFClusterSpec.from_dict(
        {
            **BASE,
            "pod": {
                "annotations": {"example.com/x": trap},
                "sidecars": [{"name": "a", "image": "b", "args": [trap]}],
            },
        }
    )
    spec = pod_templates(render(s))["worker"]
    assert spec["metadata"]["annotations"]["example.com/x"] == trap
    assert spec["spec"]["initContainers"][0]["args"] == [trap]


def test_template_dir_from_the_spec_overrides_the_builtins(tmp_path: Path) -> None:
    builtin = (template_dirs()[0] / "_macros.yaml.j2").read_text()
    marked = builtin.replace(
        "  enableServiceLinks: false\n", "  enableServiceLinks: false\n  hostIPC: false\n"
    )
    assert marked != builtin
    (tmp_path / "_macros.yaml.j2").write_text(marked)
    spec = TFClusterSpec.from_dict({**BASE, "template_dir": str(tmp_path)})
    assert pod_templates(render(spec))["worker"]["spec"]["hostIPC"] is False
    assert "hostIPC" not in pod_templates(render(TFClusterSpec.from_dict(BASE)))["worker"]["spec"]


def test_the_local_backend_refuses_secret_references_naming_the_field() -> None:
    s = TFClusterSpec.from_dict(
        {**BASE, "worker": {"replicas": 1, "pod": {"env_from": [{"secretRef": {"name": "s"}}]}}}
    )
    with pytest.raises(SpecError) as info:
        _local_pod.refuse_cluster_references(s)
    assert info.value.field == "worker.pod.env_from"
    _local_pod.refuse_cluster_references(TFClusterSpec.from_dict({**BASE, "pod": {"shm_size": "1Gi"}}))


def test_the_local_backend_runs_the_training_container_not_a_sidecar() -> None:
    s = TFClusterSpec.from_dict({**BASE, "pod": {"sidecars": [{"name": "agent", "image": "x"}]}})
    assert _local_pod.role_containers(render(s))["worker"]["name"] == "tensorflow"
