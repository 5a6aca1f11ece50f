"""The RBAC manifests of deploy/rbac/ for a given namespace (used by the integration tests;
also handy as ``python deploy/rbac/render.py <namespace> [--namespace-per-training] | kubectl apply -f -``).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NAMESPACED = HERE / "namespaced.yaml"
NAMESPACE_PER_TRAINING = HERE / "namespace-per-training.yaml"
APISERVER_ADDRESS = HERE / "apiserver-address.yaml"
CAPACITY_CHECK = HERE / "capacity-check.yaml"
SERVICE_ACCOUNT = "airflow-tfk"
#: The ServiceAccount's namespace as the YAML files spell it.
DEFAULT_NAMESPACE = "airflow"
CLUSTER_SCOPED = (
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def _sa_user(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"


def manifests(
    namespace: str,
    *,
    namespace_per_training: bool = False,
    name_suffix: str = "",
    pull_secrets: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """The objects of ``namespaced.yaml`` (or ``namespace-per-training.yaml``) with the
    ServiceAccount (and, for the Role, every object) in ``namespace``.

    ``name_suffix`` is appended to the cluster-scoped names, so several copies can coexist.
    ``pull_secrets``: the image pull secrets of ``namespace`` the per-training identity may
    read (by name) to copy; the file's example name when None.
    """
    import yaml

    path = NAMESPACE_PER_TRAINING if namespace_per_training else NAMESPACED
    docs = [copy.deepcopy(d) for d in yaml.safe_load_all(path.read_text()) if d]
    for d in docs:
        meta = d["metadata"]
        if d["kind"] in CLUSTER_SCOPED:
            meta["name"] += name_suffix
            if d["kind"] == "ClusterRoleBinding":
                d["roleRef"]["name"] += name_suffix
            if d["kind"] == "ValidatingAdmissionPolicyBinding":
                d["spec"]["policyName"] += name_suffix
            for condition in (d.get("spec") or {}).get("matchConditions") or []:
                # the policies apply to this namespace's ServiceAccount
                condition["expression"] = condition["expression"].replace(
                    f"'{_sa_user(DEFAULT_NAMESPACE)}'", f"'{_sa_user(namespace)}'"
                )
        else:
            meta["namespace"] = namespace
        for s in d.get("subjects", []):
            s["namespace"] = namespace
        if d["kind"] == "Role" and pull_secrets is not None:
            for rule in d["rules"]:
                if rule["resources"] == ["secrets"]:
                    rule["resourceNames"] = list(pull_secrets)
    return docs


def apiserver_address_manifests(namespace: str, *, name_suffix: str = "") -> list[dict[str, Any]]:
    """``apiserver-address.yaml`` (a Role and RoleBinding in ``default``) bound to the
    ServiceAccount of ``namespace``; ``name_suffix`` lets several copies coexist."""
    return _bound(APISERVER_ADDRESS, namespace, name_suffix)


def capacity_check_manifests(namespace: str, *, name_suffix: str = "") -> list[dict[str, Any]]:
    """``capacity-check.yaml`` (a ClusterRole and its binding) for the ServiceAccount of
    ``namespace``."""
    return _bound(CAPACITY_CHECK, namespace, name_suffix)


def _bound(path: Path, namespace: str, name_suffix: str) -> list[dict[str, Any]]:
    import yaml

    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for d in docs:
        d["metadata"]["name"] += name_suffix
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            d["roleRef"]["name"] += name_suffix
        for s in d.get("subjects", []):
            s["namespace"] = namespace
    return docs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("namespace")
    p.add_argument("--namespace-per-training", action="store_true")
    p.add_argument(
        "--pull-secret",
        action="append",
        dest="pull_secrets",
        help="an image pull secret of <namespace> the per-training identity may read to copy (repeatable)",
    )
    a = p.parse_args(argv)
    import yaml

    sys.stdout.write(
        yaml.safe_dump_all(
            manifests(
                a.namespace, namespace_per_training=a.namespace_per_training, pull_secrets=a.pull_secrets
            ),
            sort_keys=False,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
