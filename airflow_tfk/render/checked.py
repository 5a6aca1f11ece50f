"""A cluster's manifests rendered under the platform policy, with every violation.

One place for what the Kubernetes backend (before create), ``airflow-tfk render`` and
``airflow-tfk validate`` each need: the manifests rendered at the policy's Pod Security
level (a per-training namespace enforces it), and the violations - first those of the
spec's own pod settings, named by the spec's fields
(:func:`~airflow_tfk.spec.spec_policy.check_spec`), then those only the final pods show
(:func:`~airflow_tfk.spec.platform_policy.check_manifests`: a template override, the
training container), each once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.platform_policy import PlatformPolicy, Violation

__all__ = ["render_checked"]


def render_checked(
    spec: TFClusterSpec,
    policy: PlatformPolicy,
    identity: RunIdentity | None = None,
    template_dir: str | Path | None = None,
) -> tuple[list[dict[str, Any]], list[Violation]]:
    """``(manifests, violations)``; render errors are raised as :func:`render` raises them."""
    from airflow_tfk.render.manifests import render
    from airflow_tfk.spec.platform_policy import check_manifests
    from airflow_tfk.spec.spec_policy import check_spec

    manifests = render(spec, identity, template_dir, pod_security_level=policy.pod_security_level.value)
    found = check_spec(spec, policy)
    seen = {(v.rule, v.message) for v in found}
    # the rendered pods' own findings, less those the spec's fields already named
    found += [v for v in check_manifests(manifests, policy) if (v.rule, v.message) not in seen]
    return manifests, found
