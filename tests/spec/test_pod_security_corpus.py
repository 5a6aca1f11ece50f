"""The hostile-pod corpus (tests/hostile/pod_security_corpus.py) checked offline: every case
the spec accepts today renders, and the platform policy refuses every one that breaks the
Pod Security level, naming the field and the check the Pod Security Standards name for it;
the controls pass. The same corpus goes to the real API server in
tests/k8s_integration/test_pod_security_parity.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_tfk.spec.platform_policy import (
    PlatformPolicy,
    check_manifests,
    check_pod_security,
    pod_security_detail,
)
from tests.hostile.pod_security_corpus import cases, manifests, pod_templates, resolve_fields

CASES = cases()
#: hostile beyond the Pod Security Standards: refused by the platform's own rules
PLATFORM_ONLY = {
    "node-name": "platform/node-name",
    "token-automount": "platform/service-account-token",
    "projected-token": "platform/service-account-token",
    "projected-token-audience": "platform/service-account-token",
    "cap-net-bind-service": "platform/capabilities",
}


def _checks(violations: list[Any]) -> set[str]:
    return {v.rule.removeprefix("pod-security/") for v in violations}


def test_the_corpus_is_large_and_deterministic() -> None:
    assert len(CASES) >= 300
    assert [c.id for c in cases()] == [c.id for c in CASES]
    hostile = [c for c in CASES if c.expected("restricted") or c.atom.id in PLATFORM_ONLY]
    assert len(hostile) >= 300, len(hostile)
    channels = {c.id.split("/")[0] for c in CASES}
    assert channels >= {
        "sidecar",
        "init",
        "role-sidecar",
        "patch",
        "role-patch",
        "patch+sidecar",
        "volumes",
        "role-volumes",
        "annotations",
        "override",
        "combined",
    }


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_every_case_names_exactly_its_checks_and_fields(level: str) -> None:
    wrong = []
    slowest = 0.0
    for case in CASES:
        for role, where, template in pod_templates(case):
            started = time.process_time()
            found = check_pod_security(template, level, where=where)
            detail = pod_security_detail(template, level)
            slowest = max(slowest, time.process_time() - started)
            want = case.expected(level) if role == case.role else frozenset()
            if _checks(found) != want:
                wrong.append((case.id, role, sorted(want), sorted(_checks(found))))
            if (detail is None) != (not found):
                wrong.append((case.id, role, "detail", detail))
            if role == case.role and want and level == "restricted":  # its fields: every check
                named = {v.field for v in found}
                missing = [f for f in resolve_fields(case.expected_fields(where), template) if f not in named]
                if missing:
                    wrong.append((case.id, role, "fields not named", missing, sorted(named)))
    assert wrong == []
    assert slowest < 0.05  # CPU seconds for one pod template, far under the 1 s bound


def test_the_default_policy_refuses_every_hostile_case_and_passes_the_controls() -> None:
    policy = PlatformPolicy()
    wrong = []
    refused = 0
    for case in CASES:
        violations = check_manifests(manifests(case), policy)
        rules = {v.rule for v in violations}
        hostile = bool(case.expected("restricted"))
        if case.atom.id in PLATFORM_ONLY:
            ok = PLATFORM_ONLY[case.atom.id] in rules and not any(
                r.startswith("pod-security/") for r in rules
            )
        elif hostile:
            ok = {f"pod-security/{c}" for c in case.expected("restricted")} <= rules
        else:
            ok = not violations
        refused += bool(violations)
        if not ok:
            wrong.append((case.id, sorted(rules)))
    assert wrong == []
    assert refused >= 300


def test_a_hostile_sidecar_is_named_with_its_path_and_rule() -> None:
    (case,) = [c for c in CASES if c.id == "sidecar/privileged"]
    found = check_manifests(manifests(case), PlatformPolicy())
    assert [(v.field, v.rule) for v in found if v.rule == "pod-security/privileged"] == [
        ("worker.template.spec.initContainers[0].securityContext.privileged", "pod-security/privileged")
    ]
