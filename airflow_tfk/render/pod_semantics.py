"""What the API server refuses in a pod template that no JSON Schema says.

Kubernetes' schema checks types and names; the API server's validation (``ValidatePodSpec``)
and its admission plugins (Priority, RuntimeClass) check how fields go together, and the
Job controller's pods are refused for them after the Job was created. Each rule here is one
such check, run offline on the final pod templates (after every patch), so ``validate``
and render refuse what the API server would: the same class of spec, not one example.
``tests/k8s_integration/test_api_parity.py`` compares these verdicts with the API
server's on a generated corpus. Pure: no Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["pod_spec_errors"]

# the platform's pod is Linux: these settings of its templates exist only there
_LINUX_ONLY_POD = (
    "seLinuxOptions",
    "seccompProfile",
    "appArmorProfile",
    "fsGroup",
    "fsGroupChangePolicy",
    "sysctls",
    "runAsUser",
    "runAsGroup",
    "supplementalGroups",
    "supplementalGroupsPolicy",
    "seLinuxChangePolicy",
)
_LINUX_ONLY_CONTAINER = (
    "seLinuxOptions",
    "seccompProfile",
    "appArmorProfile",
    "capabilities",
    "readOnlyRootFilesystem",
    "privileged",
    "allowPrivilegeEscalation",
    "procMount",
    "runAsUser",
    "runAsGroup",
)
_BLOCK_SOURCES = ("persistentVolumeClaim", "ephemeral")
_WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
_GROUPS = ("containers", "initContainers")


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for group in _GROUPS:
        items = spec.get(group)
        for i, c in enumerate(items if isinstance(items, list) else []):
            if isinstance(c, Mapping):
                yield f"spec.{group}[{i}]", c


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pod_spec_errors(template: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(path in the pod template, why the API server refuses it) of ``template``."""
    spec = _map(template.get("spec"))
    yield from _namespaces(spec)
    yield from _create_only(spec)
    yield from _os(spec)
    yield from _volume_devices(spec)
    yield from _topology_spread(spec)
    yield from _resource_claims(spec)
    yield from _dns(spec)


def _dns(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    import ipaddress

    config = spec.get("dnsConfig")
    servers = _map(config).get("nameservers") or []
    if spec.get("dnsPolicy") == "None" and not servers:
        yield "spec.dnsPolicy", "is None, which needs at least one dnsConfig.nameservers entry"
    if isinstance(servers, list):
        if len(servers) > 3:
            yield "spec.dnsConfig.nameservers", f"may list at most 3 nameservers (got {len(servers)})"
        for i, server in enumerate(servers):
            try:
                ipaddress.ip_address(str(server))
            except ValueError:
                yield f"spec.dnsConfig.nameservers[{i}]", f"must be an IP address (got {server!r})"


def _namespaces(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    if spec.get("hostPID") is True and spec.get("shareProcessNamespace") is True:
        yield (
            "spec.hostPID",
            "cannot be true beside the platform's shareProcessNamespace (the API server refuses both)",
        )


def _create_only(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    if spec.get("ephemeralContainers"):
        yield "spec.ephemeralContainers", "cannot be set when a pod is created (only through kubectl debug)"
    if spec.get("priority") is not None:
        yield (
            "spec.priority",
            "is computed by the API server from priorityClassName; set pod.priority_class instead",
        )
    if spec.get("overhead") is not None:
        yield "spec.overhead", "is set by the API server from the RuntimeClass; set pod.runtime_class instead"


def _os(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    os_name = _map(spec.get("os")).get("name")
    if "os" in spec and spec["os"] is not None and not os_name:
        yield "spec.os.name", "is required"
    if os_name is not None and os_name != "linux":
        pod_sc = _map(spec.get("securityContext"))
        used = [f"securityContext.{k}" for k in _LINUX_ONLY_POD if pod_sc.get(k) is not None]
        if spec.get("shareProcessNamespace") is not None:
            used.insert(0, "shareProcessNamespace")
        if spec.get("hostUsers") is not None:
            used.append("hostUsers")
        for at, c in _containers(spec):
            sc = _map(c.get("securityContext"))
            used += [f"{at}.securityContext.{k}" for k in _LINUX_ONLY_CONTAINER if sc.get(k) is not None]
        if used:
            yield (
                "spec.os.name",
                f"is {os_name!r}, but the pod has Linux-only settings ({', '.join(used[:4])}"
                f"{', ...' if len(used) > 4 else ''}): the platform's pods run on Linux",
            )
    if os_name == "linux":
        if _map(spec.get("securityContext")).get("windowsOptions") is not None:
            yield "spec.securityContext.windowsOptions", "is for Windows pods, not with os.name linux"
        for at, c in _containers(spec):
            if _map(c.get("securityContext")).get("windowsOptions") is not None:
                yield f"{at}.securityContext.windowsOptions", "is for Windows pods, not with os.name linux"


def _volume_devices(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, Mapping)}
    for at, c in _containers(spec):
        mounted = {m.get("name") for m in c.get("volumeMounts") or [] if isinstance(m, Mapping)}
        mount_paths = {m.get("mountPath") for m in c.get("volumeMounts") or [] if isinstance(m, Mapping)}
        for j, d in enumerate(c.get("volumeDevices") or []):
            if not isinstance(d, Mapping):
                continue
            where = f"{at}.volumeDevices[{j}]"
            volume = volumes.get(d.get("name"))
            if volume is None:
                yield f"{where}.name", f"names no volume of the pod ({d.get('name')!r})"
            elif not any(volume.get(k) is not None for k in _BLOCK_SOURCES):
                yield (
                    f"{where}.name",
                    f"names the volume {d.get('name')!r}, which is no persistentVolumeClaim or ephemeral "
                    "volume: only those give a block device",
                )
            if d.get("name") in mounted:
                yield (
                    f"{where}.name",
                    "is also mounted by volumeMounts: a volume is a device or a mount, not both",
                )
            if d.get("devicePath") in mount_paths:
                yield f"{where}.devicePath", "is also a mountPath of the container"


def _topology_spread(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    seen: set[tuple[Any, Any]] = set()
    for i, t in enumerate(spec.get("topologySpreadConstraints") or []):
        if not isinstance(t, Mapping):
            continue
        at = f"spec.topologySpreadConstraints[{i}]"
        skew = t.get("maxSkew")
        if isinstance(skew, int) and skew <= 0:
            yield f"{at}.maxSkew", f"must be greater than zero (got {skew})"
        when = t.get("whenUnsatisfiable")
        if when not in _WHEN_UNSATISFIABLE:
            yield f"{at}.whenUnsatisfiable", f"must be one of {', '.join(_WHEN_UNSATISFIABLE)} (got {when!r})"
        domains = t.get("minDomains")
        if domains is not None:
            if isinstance(domains, int) and domains <= 0:
                yield f"{at}.minDomains", f"must be greater than zero (got {domains})"
            if when != "DoNotSchedule":
                yield f"{at}.minDomains", "can be set only with whenUnsatisfiable: DoNotSchedule"
        pair = (t.get("topologyKey"), when)
        if pair in seen:
            yield f"{at}", f"repeats the topologyKey {pair[0]!r} with whenUnsatisfiable {when!r}"
        seen.add(pair)


def _resource_claims(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    names = set()
    for i, claim in enumerate(spec.get("resourceClaims") or []):
        if not isinstance(claim, Mapping):
            continue
        names.add(claim.get("name"))
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(k)]
        if len(sources) != 1:
            yield (
                f"spec.resourceClaims[{i}]",
                "needs exactly one of resourceClaimName or resourceClaimTemplateName",
            )
    for at, c in _containers(spec):
        for j, claim in enumerate(_map(c.get("resources")).get("claims") or []):
            if isinstance(claim, Mapping) and claim.get("name") not in names:
                yield (
                    f"{at}.resources.claims[{j}].name",
                    f"names no resourceClaims entry of the pod ({claim.get('name')!r})",
                )


def check_pod_semantics(spec: Any, manifests: list[dict[str, Any]]) -> None:
    """Raise every refusal of :func:`pod_spec_errors` in the rendered pod templates, each on
    the spec field that made it: the template patch that sets that path, else the pod
    rules of the role (or of the cluster), else the templates."""
    from airflow_tfk.core.errors import SpecError
    from airflow_tfk.render.pods import role_templates
    from airflow_tfk.spec.decl import Errors

    errors = Errors()
    seen: set[tuple[str, str]] = set()
    for doc in manifests:
        for role, holder in role_templates(doc):
            for path, why in pod_spec_errors(holder["template"]):
                field = _field_of(spec, role, path)
                if (field, path + why) in seen:
                    continue
                seen.add((field, path + why))
                errors.add(SpecError(field, f"makes a {role} pod that the API server refuses: {path}: {why}"))
    errors.raise_if_any()


def _field_of(spec: Any, role: str, path: str) -> str:
    rules = spec.roles()[role].pod
    for where, patch in (
        (f"{role}.pod.template_patch", rules.template_patch),
        ("pod.template_patch", spec.pod.template_patch),
    ):
        if patch and _touches(patch, path):
            return where
    if not rules.is_empty():
        return f"{role}.pod"
    if not spec.pod.is_empty():
        return "pod"
    return "template_dir" if spec.template_dir is not None else role


def _touches(patch: Any, path: str) -> bool:
    """Whether ``patch`` sets ``path`` (list indexes ignored: any item of the list)."""
    keys = [k.split("[")[0] for k in path.split(".")]
    nodes = [patch]
    for key in keys:
        nxt = []
        for node in nodes:
            if isinstance(node, Mapping) and key in node:
                value = node[key]
                nxt.extend(value if isinstance(value, list) else [value])
        if not nxt:
            return False
        nodes = nxt
    return True
