"""The pod rules of one role as the templates print them, and the pod template patch applied
to what they rendered.

:func:`pod_context` turns the role's joined rules
(:func:`~airflow_tfk.spec.pods.role_rules`) into the plain data ``templates/_macros.yaml.j2`` prints,
every value through ``tojson``: the user's strings are never evaluated as templates.
:func:`patch_pod_templates` applies the role's strategic merge patches to the pod templates
of a rendered Job or JobSet, and checks that what the cluster relies on is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.render.templating import RenderError
from airflow_tfk.spec.placement import KUEUE_TOPOLOGY, affinity_with_placement
from airflow_tfk.spec.pod_patch import MAIN_CONTAINER, apply_patch
from airflow_tfk.spec.pods import hardened as _hardened
from airflow_tfk.spec.pods import role_rules

__all__ = ["SHM_VOLUME", "patch_pod_templates", "pod_context"]

SHM_VOLUME = "tfk-shm"


def pod_context(spec: Any, role: str, selector: Mapping[str, str]) -> dict[str, Any]:
    """What ``pod_template`` prints for the role's pods (``r.pod`` in the templates)."""
    rules = role_rules(spec, role)
    spread = [
        c if "labelSelector" in c else {**c, "labelSelector": {"matchLabels": dict(selector)}}
        for c in rules["topology_spread"]
    ]
    volumes = list(rules["volumes"])
    mounts = list(rules["volume_mounts"])
    if rules["shm_size"] is not None:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": rules["shm_size"]}})
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    # Native sidecars: init containers that keep running, so a Job's pod completes when the
    # task exits instead of waiting for a sidecar that never does (Kubernetes >= 1.29).
    init = [_hardened(c) for c in rules["init_containers"]]
    init += [{**_hardened(c), "restartPolicy": "Always"} for c in rules["sidecars"]]
    annotations = dict(rules["annotations"])
    placement = getattr(spec, "placement", None)
    if placement is not None and spec.queue_name is not None:  # Kueue's Topology Aware Scheduling
        annotations[KUEUE_TOPOLOGY[placement.mode]] = placement.level
    return {
        "affinity": affinity_with_placement(rules["affinity"], placement, {naming.LABEL_CLUSTER: spec.name}),
        "topology_spread": spread,
        "priority_class": rules["priority_class"],
        "runtime_class": rules["runtime_class"],
        "service_account": rules["service_account"],
        "labels": rules["labels"],
        "annotations": annotations,
        "volumes": volumes,
        "volume_mounts": mounts,
        "env_from": rules["env_from"],
        "env_value_from": [{"name": k, "valueFrom": v} for k, v in rules["env_value_from"].items()],
        "init_containers": init,
    }


def role_templates(doc: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The pod templates of a rendered Job or JobSet (none in any other object), as
    ``(role, holder)``: the template is ``holder["template"]``, so a caller can replace it."""
    if doc.get("kind") == "Job":
        holders = [doc["spec"]]
    elif doc.get("kind") == "JobSet":
        holders = [rj["template"]["spec"] for rj in doc["spec"]["replicatedJobs"]]
    else:
        return []
    return [(h["template"]["metadata"]["labels"][naming.LABEL_ROLE], h) for h in holders]


def patch_pod_templates(doc: dict[str, Any], patches: Mapping[str, list[Mapping[str, Any]]]) -> None:
    """Apply each role's patches to its pod template in ``doc`` (a Job or a JobSet), in place."""
    for role, holder in role_templates(doc):
        template = holder["template"]
        for patch in patches.get(role, ()):
            patched = apply_patch(template, patch)
            _same_contract(template, patched, f"{role}.pod.template_patch")
            template = patched
        holder["template"] = template


def _contract(template: Mapping[str, Any]) -> Any:
    spec = template.get("spec") or {}
    main = [c for c in spec.get("containers") or [] if c.get("name") == MAIN_CONTAINER]
    keep = ("image", "command", "args", "ports", "env", "envFrom", "volumeMounts", "resources")
    return (
        (template.get("metadata") or {}).get("labels"),
        spec.get("restartPolicy"),
        spec.get("subdomain"),
        spec.get("hostNetwork"),
        [c.get("name") for c in spec.get("containers") or []],
        [{k: c.get(k) for k in keep} for c in main],
    )


def _same_contract(before: Mapping[str, Any], after: Mapping[str, Any], where: str) -> None:
    # The spec refuses such patches; this holds for a template override too.
    if _contract(before) != _contract(after):
        raise RenderError(
            f"{where}: changes what the cluster relies on (labels, containers, ports, restartPolicy)"
        )
