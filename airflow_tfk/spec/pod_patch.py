"""A strategic merge patch of a pod template, and what such a patch may not touch.

Kubernetes' strategic merge patch is what ``kubectl patch`` and TFJob users know: maps
merge key by key, ``null`` removes a key, and the lists Kubernetes gives a merge key
(containers by ``name``, volumes by ``name``, env by ``name``, ports by ``containerPort``,
volume mounts by ``mountPath``...) merge item by item; every other list is replaced. This
module applies it to a ``PodTemplateSpec`` with the merge keys of the pod's own schema
(:data:`MERGE_KEYS`), and the directives ``$patch: delete``, ``$patch: replace`` and
``$patch: merge``. The other directives (``$retainKeys``, ``$setElementOrder/...``,
``$deleteFromPrimitiveList/...``) are refused by :func:`check_patch`, naming them, rather
than half applied.

:func:`check_patch` also refuses what would break the cluster's contract or what a spec field
already names: one source for each setting, so the spec's value is never silently
overridden (see :data:`NAMED_BY_SPEC`). Pure: no Kubernetes client.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from airflow_tfk.core.errors import SpecError

__all__ = ["MERGE_KEYS", "NAMED_BY_SPEC", "apply_patch", "check_patch"]

#: the merge key of each list of a PodTemplateSpec that Kubernetes merges item by item
#: (``x-kubernetes-patch-merge-key`` of the core/v1 OpenAPI), by its path with ``[]``
#: standing for "every item"
MERGE_KEYS: dict[str, str] = {
    "spec.containers": "name",
    "spec.initContainers": "name",
    "spec.ephemeralContainers": "name",
    "spec.volumes": "name",
    "spec.imagePullSecrets": "name",
    "spec.hostAliases": "ip",
    "spec.topologySpreadConstraints": "topologyKey",
    "spec.resourceClaims": "name",
    "spec.schedulingGates": "name",
    "metadata.ownerReferences": "uid",
    **{
        f"spec.{group}[].{field}": key
        for group in ("containers", "initContainers", "ephemeralContainers")
        for field, key in (
            ("env", "name"),
            ("ports", "containerPort"),
            ("volumeMounts", "mountPath"),
            ("volumeDevices", "devicePath"),
            ("resizePolicy", "resourceName"),
        )
    },
}

#: the container the runtime relies on: the Jobs' podFailurePolicy and the watcher name it
MAIN_CONTAINER = "tensorflow"

#: pod fields a patch may not set, and the spec field that says it instead (or why not)
NAMED_BY_SPEC: dict[str, str] = {
    "metadata.labels": "set pod.labels or <role>.pod.labels",
    "metadata.annotations": "set pod.annotations or <role>.pod.annotations",
    "spec.restartPolicy": "is the platform's: podFailurePolicy needs Never",
    "spec.subdomain": "is the platform's: every task's DNS name depends on it",
    "spec.hostname": "is the platform's: every task's DNS name depends on it",
    "spec.setHostnameAsFQDN": "is the platform's: every task's DNS name depends on it",
    "spec.hostNetwork": "is the platform's: tasks listen on the TF port of their own pod IP",
    "spec.shareProcessNamespace": "is the platform's: a task stops on SIGTERM through it",
    "spec.nodeSelector": "set <role>.node_selector",
    "spec.tolerations": "set <role>.tolerations",
    "spec.affinity": "set pod.affinity or <role>.pod.affinity",
    "spec.topologySpreadConstraints": "set pod.topology_spread or <role>.pod.topology_spread",
    "spec.priorityClassName": "set pod.priority_class or <role>.pod.priority_class",
    "spec.runtimeClassName": "set pod.runtime_class or <role>.pod.runtime_class",
    "spec.serviceAccountName": "set service_account or <role>.pod.service_account",
    "spec.serviceAccount": "set service_account or <role>.pod.service_account",
    "spec.imagePullSecrets": "set image_pull_secrets",
    "spec.terminationGracePeriodSeconds": "set termination_grace_seconds",
    "spec.activeDeadlineSeconds": "set max_duration_seconds",
    "spec.initContainers": "set pod.init_containers or pod.sidecars (or <role>.pod.*)",
    "spec.volumes": "set pod.volumes or <role>.pod.volumes",
}

#: fields of the main container a patch may not set, and what sets them instead
MAIN_NAMED_BY_SPEC: dict[str, str] = {
    "image": "set image",
    "imagePullPolicy": "set image_pull_policy",
    "command": "is what the runtime runs: set command or <role>.command",
    "args": "is what the runtime runs: set args or <role>.args",
    "ports": "carries the TF port the cluster's addresses name: set port or metrics_port",
    "env": "set env, <role>.env or pod.env_value_from",
    "envFrom": "set pod.env_from",
    "resources": "set <role>.resources",
    "volumeMounts": "set pod.volume_mounts",
    "restartPolicy": "is the platform's: the task's restarts are per index",
}

_PATCH = "$patch"
_UNSUPPORTED_PREFIXES = ("$setElementOrder/", "$deleteFromPrimitiveList/", "$retainKeys")


def check_patch(patch: Any, where: str) -> dict[str, Any]:
    """``patch`` as a plain mapping, or a :class:`SpecError` naming the first part of it
    that breaks the cluster's contract, that a spec field names, or that this
    implementation of strategic merge does not apply."""
    if not isinstance(patch, Mapping):
        raise SpecError(where, "must be a mapping (a strategic merge patch of the pod template)", patch)
    _directives(patch, where)
    for key in patch:
        if key not in ("metadata", "spec"):
            raise SpecError(f"{where}.{key}", "is not a field of a pod template (metadata, spec)")
    meta = patch.get("metadata")
    if meta is not None:
        _mapping(meta, f"{where}.metadata")
        for key in meta:
            path = f"metadata.{key}"
            raise SpecError(f"{where}.{path}", NAMED_BY_SPEC.get(path, "is the platform's: it names the pod"))
    spec = patch.get("spec")
    if spec is not None:
        _mapping(spec, f"{where}.spec")
        for key in spec:
            reason = NAMED_BY_SPEC.get(f"spec.{key}")
            if reason is not None:
                raise SpecError(f"{where}.spec.{key}", reason)
        _containers(spec.get("containers"), f"{where}.spec.containers")
    return copy.deepcopy(dict(patch))


def _containers(items: Any, where: str) -> None:
    if items is None:
        return
    if not isinstance(items, list):
        raise SpecError(where, "must be a list", items)
    for i, item in enumerate(items):
        at = f"{where}[{i}]"
        _mapping(item, at)
        if item.get(_PATCH) is not None:
            raise SpecError(f"{at}.$patch", "would delete or replace the containers the cluster runs")
        if item.get("name") != MAIN_CONTAINER:
            raise SpecError(
                f"{at}.name",
                f"a patch may change only the {MAIN_CONTAINER!r} container; add others with pod.sidecars",
                item.get("name"),
            )
        for key in item:
            if key in MAIN_NAMED_BY_SPEC:
                raise SpecError(f"{at}.{key}", MAIN_NAMED_BY_SPEC[key])


def _mapping(value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        raise SpecError(where, "must be a mapping", value)
    if value.get(_PATCH) not in (None, "merge"):
        raise SpecError(f"{where}.$patch", "would delete or replace a part of the pod the cluster needs")


def _directives(node: Any, where: str) -> None:
    """Refuse the directives :func:`apply_patch` does not implement, wherever they are."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            if not isinstance(key, str):
                raise SpecError(where, "keys must be strings", key)
            if key.startswith(_UNSUPPORTED_PREFIXES):
                raise SpecError(
                    f"{where}.{key}", "is a strategic merge directive this patch does not support"
                )
            if key == _PATCH and value not in ("delete", "replace", "merge"):
                raise SpecError(f"{where}.{key}", "must be delete, replace or merge", value)
            _directives(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _directives(item, f"{where}[{i}]")


def apply_patch(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (a PodTemplateSpec) with the strategic merge ``patch`` applied; neither
    argument is changed."""
    return _merge(copy.deepcopy(dict(base)), patch, "")


def _merge(base: dict[str, Any], patch: Mapping[str, Any], path: str) -> dict[str, Any]:
    if patch.get(_PATCH) == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != _PATCH}
    for key, value in patch.items():
        if key == _PATCH:
            continue
        at = f"{path}.{key}" if path else key
        if value is None:
            base.pop(key, None)
        elif isinstance(value, Mapping):
            if value.get(_PATCH) == "delete":
                base.pop(key, None)
                continue
            current = base.get(key)
            base[key] = _merge(current if isinstance(current, dict) else {}, value, at)
        elif isinstance(value, list) and _list_key(at) is not None:
            current = base.get(key)
            base[key] = _merge_list(current if isinstance(current, list) else [], value, at)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _list_key(path: str) -> str | None:
    # the paths here carry no indices (``spec.containers.env``); the table writes the
    # list of a list item as ``spec.containers[].env``
    parts = path.split(".")
    generic = path if len(parts) < 3 else f"{parts[0]}.{parts[1]}[].{'.'.join(parts[2:])}"
    return MERGE_KEYS.get(generic)


def _merge_list(base: list[Any], patch: list[Any], path: str) -> list[Any]:
    key = _list_key(path)
    assert key is not None
    if any(isinstance(item, Mapping) and item.get(_PATCH) == "replace" and len(item) == 1 for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, Mapping) and _PATCH in i)]
    out = list(base)
    for item in patch:
        if not isinstance(item, Mapping):
            out.append(copy.deepcopy(item))
            continue
        found = next(
            (i for i, cur in enumerate(out) if isinstance(cur, dict) and cur.get(key) == item.get(key)), None
        )
        if item.get(_PATCH) == "delete":
            if found is not None:
                del out[found]
            continue
        if found is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != _PATCH and v is not None})
        else:
            out[found] = _merge(out[found], item, path)
    return out
