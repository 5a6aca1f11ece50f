"""deploy/rbac/ as a class: no identity of ours reads Secrets beyond the pull secrets it
copies, named one by one in one namespace (the control-plane proof, with the API server's
authorizer: tests/k8s_integration/test_rbac.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

RBAC = Path(__file__).resolve().parents[1] / "deploy" / "rbac"
READS = {"get", "list", "watch", "*"}


def _rules() -> list[tuple[str, str, dict]]:
    out = []
    for path in sorted(RBAC.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("ClusterRole", "Role"):
                out.extend(
                    (f"{path.name}: {doc['kind']} {doc['metadata']['name']}", doc["kind"], r)
                    for r in doc["rules"]
                )
    return out


@pytest.mark.parametrize("where,kind,rule", _rules(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_rule_reads_secrets_beyond_named_pull_secrets(where, kind, rule) -> None:
    secrets = "" in rule.get("apiGroups", []) and {"secrets", "*"} & set(rule.get("resources", []))
    reads = READS & set(rule.get("verbs", []))
    if not (secrets and reads):
        return
    assert kind == "Role", f"{where}: {sorted(reads)} on secrets in every namespace"
    assert rule.get("resourceNames") and reads == {"get"}, f"{where}: secrets read by any name: {rule}"


def test_the_per_training_identity_reads_only_the_pull_secrets_it_is_given() -> None:
    from tests.helpers import rbac_render

    docs = rbac_render().manifests("team-a", namespace_per_training=True, pull_secrets=["regcred", "gcr"])
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "team-a"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["regcred", "gcr"], "verbs": ["get"]}
    ]
    binding = next(d for d in docs if d["kind"] == "RoleBinding")
    assert binding["subjects"][0]["namespace"] == "team-a"
