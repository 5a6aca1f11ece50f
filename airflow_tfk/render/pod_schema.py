"""The pod rules' Kubernetes objects checked against Kubernetes' own schema.

An affinity, a volume, a sidecar or a pod template patch is the user's Kubernetes object,
passed through as data; a typo in it (``nodeAfinity``, a string ``maxSkew``) would
otherwise surface only when the API server refuses the Job, after the objects before it
were applied. Each object is checked against the strict JSON Schema of its own type, so the
error names the spec field and the path inside it; the pod templates are then checked
whole, after the patches, so a patch that makes an invalid pod is named too.

The schemas come from `kubernetes-validate` (the ``validate`` extra, which ``render
--validate`` uses as well), the newest minor version it bundles; without it the API
server is the judge, and a create it refuses is rolled back. Imported when a spec uses
pod rules, at render time: never at DAG parse time.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from airflow_tfk.core.errors import SpecError
from airflow_tfk.render.pods import role_templates
from airflow_tfk.spec.decl import Errors

__all__ = ["check_pod_rules"]

_CORE = "io.k8s.api.core.v1."
#: the Kubernetes type of each pod rule that holds Kubernetes objects: (type, a list of them)
FIELD_TYPES: dict[str, tuple[str, str]] = {
    "affinity": ("Affinity", "one"),
    "topology_spread": ("TopologySpreadConstraint", "list"),
    "volumes": ("Volume", "list"),
    "volume_mounts": ("VolumeMount", "list"),
    "env_from": ("EnvFromSource", "list"),
    "env_value_from": ("EnvVarSource", "map"),
    "sidecars": ("Container", "list"),
    "init_containers": ("Container", "list"),
}


@functools.cache
def _validators() -> dict[str, Any] | None:
    try:
        import jsonschema  # type: ignore[import-untyped]
        from kubernetes_validate import utils
        from referencing import Registry, Resource
    except ImportError:
        return None
    version = sorted(utils.all_versions(), key=lambda v: tuple(int(p) for p in v.split(".")))[-1]
    defs = utils.schema_contents(f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version)
    registry = Resource.from_contents(defs) @ Registry()
    base = defs.get("$id", "/api/_definitions.json")
    names = {t for t, _ in FIELD_TYPES.values()} | {"PodTemplateSpec"}
    return {
        name: jsonschema.Draft202012Validator({"$ref": f"{base}#/$defs/{_CORE}{name}"}, registry=registry)
        for name in names
    }


def _path(error: Any) -> str:
    out = ""
    for p in error.absolute_path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def _errors(validator: Any, value: Any, where: str, whole: str = "") -> Iterator[SpecError]:
    """The schema errors of ``value``, on the field ``where`` and the path inside it; or,
    with ``whole`` (what ``value`` is), on ``where`` itself, the path in the message."""
    for error in sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path))):
        if whole:
            yield SpecError(
                where, f"makes {whole} that Kubernetes refuses: {_path(error)[1:]}: {error.message}"
            )
        else:
            yield SpecError(f"{where}{_path(error)}", f"is not valid for Kubernetes: {error.message}")


def _sections(spec: Any) -> Iterator[tuple[str, Any]]:
    yield "pod", spec.pod
    for role, rs in spec.roles().items():
        yield f"{role}.pod", rs.pod


def check_pod_rules(spec: Any, manifests: list[dict[str, Any]]) -> None:
    """Raise every schema error of the spec's pod rules and of the patched pod templates."""
    validators = _validators()
    if validators is None:
        return
    errors = Errors()
    for where, rules in _sections(spec):
        for field, (type_name, shape) in FIELD_TYPES.items():
            value = getattr(rules, field)
            if not value:
                continue
            check = validators[type_name]
            if shape == "one":
                items = [(f"{where}.{field}", value)]
            elif shape == "map":
                items = [(f"{where}.{field}.{k}", v) for k, v in value.items()]
            else:
                items = [(f"{where}.{field}[{i}]", v) for i, v in enumerate(value)]
            for at, item in items:
                for exc in _errors(check, item, at):
                    errors.add(exc)
    if not errors.items:
        for role, template in _templates(manifests):
            field, whole = _patch_field(spec, role)
            for exc in _errors(validators["PodTemplateSpec"], template, field, whole):
                errors.add(exc)
    errors.raise_if_any()


def _patch_field(spec: Any, role: str) -> tuple[str, str]:
    """The field a pod template's schema error belongs to, and what it made: the fields'
    own objects were valid, so it is the patch's (the role's, else the cluster's)."""
    if spec.roles()[role].pod.template_patch:
        return f"{role}.pod.template_patch", f"a {role} pod"
    if spec.pod.template_patch:
        return "pod.template_patch", f"a {role} pod"
    return f"{role}.pod", "a pod (with a template override?)"


def _templates(manifests: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in manifests:
        for role, holder in role_templates(doc):
            yield role, holder["template"]
