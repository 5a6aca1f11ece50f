"""The platform policy on a spec's own pod settings (airflow_tfk/spec/spec_policy.py): what a
DAG file can refuse without rendering, held against the rendered pods' check on the
hostile-pod corpus (tests/hostile/pod_security_corpus.py)."""

from __future__ import annotations

import pytest

from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.platform_policy import Level, PlatformPolicy, check_manifests
from airflow_tfk.spec.spec_policy import check_spec
from tests.hostile.pod_security_corpus import cases, manifests

SPEC_CASES = [c for c in cases() if c.spec is not None]
#: channels whose every setting is the spec's own: the parse-time check sees all of it
SPEC_CHANNELS = {"sidecar", "init", "role-sidecar", "volumes", "role-volumes"}
PATCH_RULE = "platform/template-patch-security"


def _found(violations: list) -> set[tuple[str, str]]:
    return {(v.rule, v.message) for v in violations if v.rule != PATCH_RULE}


@pytest.mark.parametrize("level", list(Level))
def test_the_spec_check_never_refuses_what_the_rendered_pods_pass(level: Level) -> None:
    """Every violation the spec check names (the template-patch rule aside, which exists
    only for specs) is one the rendered pods have too, at every level: a DAG file never
    refuses a training the backend would create."""
    policy = PlatformPolicy(pod_security_level=level)
    for case in SPEC_CASES:
        spec = TFClusterSpec.from_dict(case.spec)
        extra = _found(check_spec(spec, policy)) - _found(check_manifests(manifests(case), policy))
        assert not extra, (case.id, extra)


def test_what_a_sidecar_init_container_or_volume_breaks_is_refused_without_rendering() -> None:
    """Through the spec's own channels the two checks agree case by case: a hostile
    setting is named at parse time, a control passes."""
    policy = PlatformPolicy()
    seen = 0
    for case in SPEC_CASES:
        if case.id.split("/")[0] not in SPEC_CHANNELS:
            continue
        seen += 1
        at_parse = check_spec(TFClusterSpec.from_dict(case.spec), policy)
        rendered = check_manifests(manifests(case), policy)
        assert bool(at_parse) == bool(rendered), (case.id, at_parse, rendered)
    assert seen >= 200, seen


def test_fields_are_the_specs_own_and_each_is_named_once() -> None:
    spec = TFClusterSpec.from_dict(
        {
            "name": "p",
            "image": "x:1",
            "command": ["python", "a.py"],
            "mode": "parameter_server",
            "chief": {"replicas": 1},
            "ps": {"replicas": 1},
            "worker": {
                "replicas": 2,
                "pod": {"sidecars": [{"name": "s", "image": "y", "securityContext": {"privileged": True}}]},
            },
            "pod": {
                "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
                "template_patch": {"spec": {"hostPID": True}},
            },
        }
    )
    found = check_spec(spec, PlatformPolicy())
    fields = [v.field for v in found]
    assert len(fields) == len(set(fields)), fields  # the cluster-wide volume once, not per role
    assert "pod.template_patch.spec.hostPID" in fields
    assert "worker.pod.sidecars[0].securityContext.privileged" in fields
    assert "pod.volumes[0].hostPath" in fields
    assert not any("initContainers" in f or f.startswith(("ps.", "chief.")) for f in fields), fields


def test_a_lenient_policy_lets_the_same_spec_through() -> None:
    spec = TFClusterSpec.from_dict(
        {
            "name": "p",
            "image": "x:1",
            "command": ["python", "a.py"],
            "mode": "all_reduce",
            "worker": {"replicas": 1},
            "pod": {
                "volumes": [{"name": "h", "hostPath": {"path": "/data/x"}}],
                "template_patch": {"spec": {"hostPID": True}},
            },
        }
    )
    strict = PlatformPolicy()
    lenient = PlatformPolicy(
        pod_security_level=Level.PRIVILEGED,
        allowed_host_paths=("/data",),
        template_patch_may_set_security=True,
    )
    assert {v.rule for v in check_spec(spec, strict)} == {
        "pod-security/restrictedVolumes",
        "platform/host-paths",
        PATCH_RULE,
    }
    assert check_spec(spec, lenient) == []
