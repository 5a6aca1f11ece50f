"""How a training's pods follow the cluster's rules: scheduling (affinity, topology
spread, priority class, runtime class), extra volumes and mounts, Secret and ConfigMap
references in the environment, sidecars and init containers, labels and annotations,
and a checked strategic merge patch of the pod template for the rest.

One :class:`PodRules` section holds them for the whole cluster (``pod:``) and one per role
(``<role>.pod:``); :func:`role_rules` joins the two (the role's scalars win, its maps and
lists add to the cluster's, an item of the same name replaces the cluster's).

The Kubernetes objects among them (an affinity, a volume, a container) are kept as the
user wrote them and printed as data; their shape is checked against Kubernetes' own
schema when the manifests are rendered (:mod:`airflow_tfk.render.pod_schema`). Here, before
anything else, each field is refused, naming it, where it would break the cluster's
contract: a sidecar named like the training container, a volume or mount over the
platform's, an identity label, a Secret value spelled out. Pure: no Kubernetes client.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.checks import (
    _bounded,
    _utf8,
    annotations_size,
    not_reserved_labels,
    path_text,
    subdomain,
)
from airflow_tfk.spec.decl import Errors, spec_field, str_map_field
from airflow_tfk.spec.resources import quantity_field

__all__ = ["PLATFORM_MOUNTS", "PLATFORM_VOLUMES", "PodRules", "RolePodRules", "pod_rules_rules", "role_rules"]

#: volumes and mount paths the templates give every pod (``templates/_macros.yaml.j2``)
PLATFORM_VOLUMES = ("tfk-scratch", "tfk-tmp", "tfk-home", "tfk-shm", "data", "logs", "models")
PLATFORM_MOUNTS = ("/tfk", "/tmp")
SHM_PATH = "/dev/shm"
# A Kubernetes object of the spec (an affinity, a container) is bounded before it is
# walked: far above any real one, far below what would slow validation down.
MAX_DEPTH = 32
MAX_NODES = 20_000
MAX_ITEMS = 256
_OBJECT = {"type": "object"}
_OBJECTS = {"type": "array", "items": {"type": "object"}}
# Annotations the platform sets on every pod, or that the Job controller reads.
_RESERVED_ANNOTATION_DOMAINS = (naming.LABEL_PREFIX, "batch.kubernetes.io")


def plain_object(value: Any, path: str) -> Any:
    """A copy of ``value`` made only of JSON data (mappings with string keys, lists,
    strings, numbers, booleans, null), bounded in depth and size."""
    count = [0]

    def walk(node: Any, at: str, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_NODES or depth > MAX_DEPTH:
            raise SpecError(path, f"is too large (over {MAX_NODES} values or {MAX_DEPTH} levels deep)")
        if isinstance(node, Mapping):
            out = {}
            for key, item in node.items():
                if not isinstance(key, str):
                    raise SpecError(at, "keys must be strings", key)
                out[key] = walk(item, f"{at}.{key}", depth + 1)
            return out
        if isinstance(node, (list, tuple)):
            return [walk(item, f"{at}[{i}]", depth + 1) for i, item in enumerate(node)]
        if isinstance(node, str):
            if "\x00" in node:
                raise SpecError(at, "must not contain NUL", node)
            _utf8(node, at)
            return node
        if node is None or isinstance(node, (bool, int)):
            return node
        if isinstance(node, float) and node == node and abs(node) != float("inf"):
            return node
        raise SpecError(at, "must be plain data (text, numbers, lists, mappings)", node)

    return walk(value, path, 0)


def k8s_object(value: Any, path: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SpecError(path, "must be a mapping (a Kubernetes object)", value)
    out: dict[str, Any] = plain_object(value, path)
    return out


def k8s_objects(value: Any, path: str) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise SpecError(path, "must be a list of Kubernetes objects", value)
    _bounded(value, path, MAX_ITEMS)
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise SpecError(f"{path}[{i}]", "must be a mapping (a Kubernetes object)", item)
        out.append(plain_object(item, f"{path}[{i}]"))
    return tuple(out)


def _named(items: tuple[dict[str, Any], ...], path: str, what: str) -> None:
    seen: set[str] = set()
    for i, item in enumerate(items):
        name = item.get("name")
        if not isinstance(name, str) or not naming.is_dns1123_label(name):
            raise SpecError(f"{path}[{i}].name", f"must be a DNS-1123 label naming the {what}", name)
        if name in seen:
            raise SpecError(f"{path}[{i}].name", f"names a second {what} {name!r}")
        seen.add(name)


def _volumes(value: Any, path: str) -> tuple[dict[str, Any], ...]:
    items = k8s_objects(value, path)
    _named(items, path, "volume")
    for i, item in enumerate(items):
        if item["name"] in PLATFORM_VOLUMES:
            raise SpecError(f"{path}[{i}].name", f"is one of the platform's volumes {PLATFORM_VOLUMES}")
        secret = item.get("secret")
        if isinstance(secret, Mapping) and not secret.get("secretName"):
            raise SpecError(f"{path}[{i}].secret.secretName", "is required")
    return items


def normal_path(path: str) -> str:
    """``path`` as the kubelet resolves it: repeated slashes, ``.`` segments and a
    trailing slash gone (``//tfk/home``, ``/tfk/./home/`` are ``/tfk/home``). posixpath's
    normpath alone keeps a leading ``//``; ``..`` is refused before (path_text)."""
    return posixpath.normpath(re.sub("/+", "/", path)) if path else path


def _under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it, both compared as :func:`normal_path` has them, so
    no spelling of a path slips past a rule about it."""
    path, root = normal_path(path), normal_path(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _mounts(value: Any, path: str) -> tuple[dict[str, Any], ...]:
    items = k8s_objects(value, path)
    seen: set[str] = set()
    for i, item in enumerate(items):
        at = f"{path}[{i}]"
        _mount_paths(item, at)
        mount = item["mountPath"]
        if any(_under(mount, root) or _under(root, mount) for root in PLATFORM_MOUNTS):
            raise SpecError(f"{at}.mountPath", f"overlaps the platform's mounts {PLATFORM_MOUNTS}", mount)
        if normal_path(mount) in seen:
            raise SpecError(f"{at}.mountPath", "is mounted twice", mount)
        seen.add(normal_path(mount))
        if not isinstance(item.get("name"), str):
            raise SpecError(f"{at}.name", "must name a volume of pod.volumes")
    return items


def _mount_paths(mount: Mapping[str, Any], at: str) -> None:
    """The paths of one volume mount, by the spec's one path rule: where it is mounted
    (absolute) and which part of the volume (``subPath``, ``subPathExpr``: inside it)."""
    if not isinstance(mount, Mapping):
        raise SpecError(at, "must be a volume mount (a mapping)", mount)
    path_text(mount.get("mountPath"), f"{at}.mountPath", kind="absolute")
    for key in ("subPath", "subPathExpr"):
        if mount.get(key) not in (None, ""):
            path_text(mount[key], f"{at}.{key}", kind="relative")


def _containers(value: Any, path: str) -> tuple[dict[str, Any], ...]:
    items = k8s_objects(value, path)
    if not items:
        return items
    # The patch module is loaded only for a spec with a container or a patch to check:
    # most specs have neither, and a training file's spec is validated at DAG parse time.
    from airflow_tfk.spec.pod_patch import MAIN_CONTAINER

    _named(items, path, "container")
    for i, item in enumerate(items):
        at = f"{path}[{i}]"
        if item["name"] == MAIN_CONTAINER:
            raise SpecError(f"{at}.name", f"{MAIN_CONTAINER!r} is the training's own container")
        if not item.get("image"):
            raise SpecError(f"{at}.image", "is required")
        mounts = item.get("volumeMounts") or ()
        if isinstance(mounts, (list, tuple)):
            for j, mount in enumerate(mounts):
                _mount_paths(mount, f"{at}.volumeMounts[{j}]")
        if "restartPolicy" in item:
            raise SpecError(
                f"{at}.restartPolicy",
                "is the platform's: sidecars run beside the task until it ends, init containers before it",
            )
    return items


def _env_from(value: Any, path: str) -> tuple[dict[str, Any], ...]:
    items = k8s_objects(value, path)
    for i, item in enumerate(items):
        refs = [k for k in ("secretRef", "configMapRef") if k in item]
        if len(refs) != 1:
            raise SpecError(f"{path}[{i}]", "needs exactly one of secretRef or configMapRef", item)
        ref = item[refs[0]]
        if not isinstance(ref, Mapping) or not naming.is_dns1123_subdomain(str(ref.get("name", ""))):
            raise SpecError(f"{path}[{i}].{refs[0]}.name", "must name a Secret or ConfigMap", ref)
        prefix = item.get("prefix")
        if isinstance(prefix, str) and (prefix.startswith("TFK_") or prefix.startswith("TF_CONFIG")):
            raise SpecError(f"{path}[{i}].prefix", "would make names reserved for the platform", prefix)
    return items


_VALUE_SOURCES = ("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef")


def _env_value_from(value: Any, path: str) -> dict[str, dict[str, Any]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(
            path, "must map variable names to a valueFrom (secretKeyRef, configMapKeyRef...)", value
        )
    _bounded(value, path, MAX_ITEMS)
    out: dict[str, dict[str, Any]] = {}
    for name, source in value.items():
        at = f"{path}.{name}"
        if not isinstance(name, str) or not naming.is_env_name(name):
            raise SpecError(at, "is not a valid environment variable name")
        if name.startswith("TFK_") or name == "TF_CONFIG":
            raise SpecError(at, "is reserved for the platform")
        obj = k8s_object(source, at)
        kinds = [k for k in _VALUE_SOURCES if obj is not None and k in obj]
        if obj is None or len(kinds) != 1:
            raise SpecError(at, f"needs exactly one of {', '.join(_VALUE_SOURCES)}", source)
        out[name] = obj
    return out


def _annotations(value: Any, path: str) -> dict[str, str]:
    for key in sorted(value):
        prefix = key.rpartition("/")[0]
        if any(prefix == d or prefix.endswith("." + d) for d in _RESERVED_ANNOTATION_DOMAINS):
            raise SpecError(f"{path}.{key}", "is reserved (the platform and the Job controller set it)")
    return dict(value)


def _object_field(check: Any, help: str) -> Any:
    """A Kubernetes object (an affinity, a patch), none when left out."""
    return spec_field(None, kind="custom", check=check, schema=_OBJECT, help=help)


def _objects_field(check: Any, help: str) -> Any:
    """A list of Kubernetes objects (volumes, containers...), empty when left out."""
    return spec_field((), kind="custom", check=check, schema=_OBJECTS, help=help)


def _patch(value: Any, path: str) -> dict[str, Any] | None:
    if value is None:
        return None
    from airflow_tfk.spec.pod_patch import check_patch

    return check_patch(k8s_object(value, path), path)


@dataclass(frozen=True)
class PodRules:
    """What the pods of the cluster (``pod:``) or of one role (``<role>.pod:``) carry
    beyond the training itself."""

    affinity: Mapping[str, Any] | None = _object_field(
        k8s_object, "a Kubernetes `affinity` (node, pod, anti)"
    )
    topology_spread: tuple[Mapping[str, Any], ...] = _objects_field(
        k8s_objects, "`topologySpreadConstraints`; one without `labelSelector` spreads this role's pods"
    )
    priority_class: str | None = spec_field(
        None, kind="str", check=subdomain("PriorityClass name"), help="`priorityClassName` of the pods"
    )
    runtime_class: str | None = spec_field(
        None, kind="str", check=subdomain("RuntimeClass name"), help="`runtimeClassName` of the pods"
    )
    service_account: str | None = spec_field(
        None,
        kind="str",
        check=subdomain("ServiceAccount name"),
        help="per role only: this role's service account, instead of `service_account`",
    )
    labels: Mapping[str, str] = str_map_field(
        "label",
        check=not_reserved_labels,
        help="labels on the pods (the platform's prefixes are reserved, as in `labels`)",
    )
    annotations: Mapping[str, str] = str_map_field(
        "label-key",
        check=_annotations,
        help="annotations on the pods (keys under `tfk.airflow.apache.org/` and `batch.kubernetes.io/` "
        "are reserved)",
    )
    volumes: tuple[Mapping[str, Any], ...] = _objects_field(
        _volumes, "extra Kubernetes volumes (a Secret, a ConfigMap, an emptyDir...)"
    )
    volume_mounts: tuple[Mapping[str, Any], ...] = _objects_field(
        _mounts, "mounts of those volumes in the training container (not under `/tfk` or `/tmp`)"
    )
    shm_size: str | None = quantity_field(
        "a memory `emptyDir` of this size at `/dev/shm` (`1Gi`; counts against the memory limit)"
    )
    env_from: tuple[Mapping[str, Any], ...] = _objects_field(
        _env_from, "`envFrom` of the training container: `{secretRef: {name: s}}` or `{configMapRef: ...}`"
    )
    env_value_from: Mapping[str, Mapping[str, Any]] = spec_field(
        factory=dict,
        kind="custom",
        check=_env_value_from,
        schema={"type": "object", "additionalProperties": _OBJECT},
        help="variables read from a Secret or ConfigMap key: `{NAME: {secretKeyRef: {name: s, key: k}}}`",
    )
    sidecars: tuple[Mapping[str, Any], ...] = _objects_field(
        _containers, "Kubernetes containers that run beside the task and stop when it ends (native sidecars)"
    )
    init_containers: tuple[Mapping[str, Any], ...] = _objects_field(
        _containers, "Kubernetes containers that run to completion before the task (and its sidecars) start"
    )
    template_patch: Mapping[str, Any] | None = _object_field(
        _patch,
        "a strategic merge patch of the pod template for what no field names; refused where it touches "
        "what a field sets or the cluster relies on (port, command, identity labels, restartPolicy)",
    )

    def is_empty(self) -> bool:
        return self == PodRules()


#: the role's section is the same class; a separate name reads better at the call sites
RolePodRules = PodRules


def _by_name(first: Iterable[Mapping[str, Any]], then: Iterable[Mapping[str, Any]], key: str) -> list[Any]:
    out: dict[Any, Any] = {item[key]: dict(item) for item in first}
    for item in then:
        out.pop(item[key], None)
        out[item[key]] = dict(item)
    return list(out.values())


#: what a sidecar or init container gets when it says nothing of its own security context:
#: the training container's hardening, less the read-only root (an agent writes its state)
SIDECAR_SECURITY = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def hardened(container: Mapping[str, Any]) -> dict[str, Any]:
    """A sidecar or init container as the pod gets it: :data:`SIDECAR_SECURITY` unless it
    sets a security context of its own."""
    out = dict(container)
    out.setdefault("securityContext", SIDECAR_SECURITY)
    return out


def role_rules(spec: Any, role: str) -> dict[str, Any]:
    """The cluster's and the role's pod rules joined, as plain data."""
    c, r = spec.pod, spec.roles()[role].pod
    return {
        "affinity": r.affinity if r.affinity is not None else c.affinity,
        "topology_spread": list(r.topology_spread or c.topology_spread),
        "priority_class": r.priority_class or c.priority_class,
        "runtime_class": r.runtime_class or c.runtime_class,
        "service_account": r.service_account or spec.service_account,
        "labels": {**c.labels, **r.labels},
        "annotations": {**c.annotations, **r.annotations},
        "volumes": _by_name(c.volumes, r.volumes, "name"),
        "volume_mounts": _by_name(c.volume_mounts, r.volume_mounts, "mountPath"),
        "shm_size": r.shm_size if r.shm_size is not None else c.shm_size,
        "env_from": [*c.env_from, *r.env_from],
        "env_value_from": {**c.env_value_from, **r.env_value_from},
        "sidecars": _by_name(c.sidecars, r.sidecars, "name"),
        "init_containers": _by_name(c.init_containers, r.init_containers, "name"),
        "patches": [p for p in (c.template_patch, r.template_patch) if p],
    }


def pod_rules_rules(spec: Any, errors: Errors) -> None:
    """The rules that join the cluster's and the roles' pod sections with the rest of the
    spec (run by :class:`~airflow_tfk.spec.cluster.TFClusterSpec`)."""
    errors.run(lambda: _cluster_only(spec), "pod")
    for role, rs in spec.roles().items():
        errors.run(functools.partial(_joined, spec, role, rs), "pod", f"{role}.pod", "env", f"{role}.env")


def _cluster_only(spec: Any) -> None:
    if spec.pod.service_account is not None:
        raise SpecError(
            "pod.service_account", "set service_account (the cluster's) or <role>.pod.service_account"
        )


def _joined(spec: Any, role: str, rs: Any) -> None:
    where = f"{role}.pod"
    joined = role_rules(spec, role)
    volumes = {v["name"] for v in joined["volumes"]}
    for mount in joined["volume_mounts"]:
        if mount["name"] not in volumes:
            owner = where if mount in rs.pod.volume_mounts else "pod"
            raise SpecError(
                f"{owner}.volume_mounts", f"mounts {mount['name']!r}, which no volume of pod.volumes names"
            )
        if joined["shm_size"] is not None and _under(mount["mountPath"], SHM_PATH):
            raise SpecError(f"{where}.volume_mounts", f"mounts over {SHM_PATH}, which shm_size sets", mount)
    names = [c["name"] for c in joined["init_containers"]] + [c["name"] for c in joined["sidecars"]]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SpecError(f"{where}.sidecars", f"and init_containers both name {dup[0]!r}")
    annotations_size(f"{where}.annotations", joined["annotations"])
    env = {**spec.env, **rs.env}
    both = sorted(set(env) & set(joined["env_value_from"]))
    if both:
        raise SpecError(f"{where}.env_value_from.{both[0]}", "is also set in env: one value per variable")
