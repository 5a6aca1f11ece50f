"""Offline validation of rendered manifests against Kubernetes' own OpenAPI schemas.

``airflow-tfk render --validate`` answers "would the API server accept these objects?"
without an API server: `kubernetes-validate` ships the JSON schemas of every Kubernetes
minor version (the ``validate`` extra). Strict schemas are used, so a field the chosen
version does not know is an error, as it would be for ``kubectl apply --validate=strict``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core import naming

# The oldest Kubernetes whose defaults carry every feature the templates rely on:
# - backoffLimitPerIndex (``retries_per_index``): alpha in 1.28 (off by default, so the API
#   server drops the field), beta and on by default since 1.29, GA in 1.33;
# - the Job completion-index label on pods (``batch.kubernetes.io/job-completion-index``,
#   which selects one task's pods for its log): beta and on by default since 1.28;
# - podFailurePolicy (permanent exit codes fail at once): beta since 1.26, GA in 1.31.
MIN_KUBERNETES_VERSION = "1.29"

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?$")


class SchemaCheckUnavailable(RuntimeError):
    """The optional `kubernetes-validate` package is not installed."""


@dataclass(frozen=True)
class Finding:
    """One object that is not valid (or could not be checked) for the chosen version."""

    kind: str
    name: str
    message: str
    checked: bool  # False: no bundled schema (e.g. a CRD such as JobSet)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.message}"


def _minor(key: tuple[int, int]) -> str:
    return f"{key[0]}.{key[1]}"


def _key(version: str) -> tuple[int, int]:
    m = _VERSION.match(version.strip())
    if m is None:
        raise ValueError(version)
    return int(m.group(1)), int(m.group(2))


def bundled_versions() -> list[str]:
    """Kubernetes minor versions whose schemas are installed, oldest first ("1.25" ...)."""
    try:
        from kubernetes_validate import utils
    except ImportError:
        raise SchemaCheckUnavailable(
            "validation needs the kubernetes-validate package: pip install 'airflow-tfk[validate]'"
        ) from None
    return sorted({_minor(_key(v)) for v in utils.all_versions()}, key=_key)


def check_version(version: str | None) -> str:
    """The ``X.Y`` to validate against; ValueError with the choices when not bundled."""
    available = bundled_versions()
    wanted = MIN_KUBERNETES_VERSION if version is None else version
    try:
        key = _key(wanted)
    except ValueError:
        raise ValueError(f"{wanted!r} is not a Kubernetes version such as 1.29") from None
    chosen = _minor(key)
    if chosen not in available:
        raise ValueError(
            f"no bundled schemas for Kubernetes {chosen} (available: {available[0]} to {available[-1]})"
        )
    return chosen


def _where(error: Any) -> str:
    parts: list[str] = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else f".{p}" if parts else str(p))
    return "".join(parts) or "(top level)"


def validate_manifests(manifests: Sequence[dict[str, Any]], version: str) -> list[Finding]:
    """Every object checked against the strict schemas of ``version`` (from :func:`check_version`)."""
    import kubernetes_validate
    from kubernetes_validate import utils

    findings = []
    for doc in manifests:
        kind = str(doc.get("kind", "?"))
        name = str(doc.get("metadata", {}).get("name", "?"))
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except utils.SchemaNotFoundError:
            findings.append(
                Finding(
                    kind, name, f"no bundled schema for {doc.get('apiVersion')} {kind}; not checked", False
                )
            )
        except utils.ValidationError as exc:
            findings.append(Finding(kind, name, f"{_where(exc)}: {exc.message}", True))
        findings += [Finding(kind, name, message, True) for message in api_server_rules(doc, version)]
    return findings


# RelaxedEnvironmentVariableValidation: on by default (beta) from Kubernetes 1.32; before,
# the API server takes only IsEnvVarName's names.
RELAXED_ENV_NAMES_SINCE = (1, 32)


def api_server_rules(doc: dict[str, Any], version: str) -> list[str]:
    """What the API server of ``version`` refuses in ``doc`` beyond its OpenAPI schema:
    env var names by that version's rule, and NetworkPolicy IP blocks
    (``ValidateIPBlock``: a valid CIDR without a zone or an IPv4-mapped address, each
    ``except`` a strict subset of ``cidr``)."""
    relaxed = _key(version) >= RELAXED_ENV_NAMES_SINCE
    out = []
    for where, container in _containers(doc):
        for i, env in enumerate(container.get("env") or []):
            name = env.get("name") if isinstance(env, dict) else None
            ok = isinstance(name, str) and (
                naming.is_relaxed_env_name(name) if relaxed else naming.is_env_name(name)
            )
            if not ok:
                rule = (
                    "printable ASCII without '='"
                    if relaxed
                    else "[-._a-zA-Z][-._a-zA-Z0-9]*, not '.' nor '..*'"
                )
                out.append(
                    f"{where}.env[{i}].name: {name!r} is no env var name for Kubernetes {version} ({rule})"
                )
    if doc.get("kind") == "NetworkPolicy":
        out += _ip_blocks(doc.get("spec") or {})
    return out


def _containers(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = doc.get("spec") or {}
    pods: list[tuple[str, Any]] = []
    if doc.get("kind") in ("Job", "Deployment", "StatefulSet"):
        pods.append(("spec.template.spec", (spec.get("template") or {}).get("spec")))
    elif doc.get("kind") == "JobSet":
        for i, rj in enumerate(spec.get("replicatedJobs") or []):
            pod = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
            pods.append((f"spec.replicatedJobs[{i}].template.spec.template.spec", pod.get("spec")))
    out = []
    for where, pod in pods:
        for key in ("initContainers", "containers"):
            for i, c in enumerate((pod or {}).get(key) or []):
                if isinstance(c, dict):
                    out.append((f"{where}.{key}[{i}]", c))
    return out


def _ip_blocks(spec: dict[str, Any]) -> list[str]:
    from airflow_tfk.core.errors import SpecError
    from airflow_tfk.spec.network import Peer

    out = []
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for r, rule in enumerate(spec.get(direction) or []):
            for p, peer in enumerate(rule.get(peers_key) or []):
                block = peer.get("ipBlock") if isinstance(peer, dict) else None
                if block is None:
                    continue
                where = f"spec.{direction}[{r}].{peers_key}[{p}].ipBlock"
                try:
                    Peer.from_value(
                        {"cidr": block.get("cidr"), "except_cidrs": list(block.get("except") or [])},
                        where,
                        egress=True,
                    )
                except SpecError as exc:
                    out.append(str(exc).replace("except_cidrs", "except"))
    return out
