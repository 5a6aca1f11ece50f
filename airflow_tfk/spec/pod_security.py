"""The Pod Security Standards, rule for rule as the API server's PodSecurity admission
implements them: every check of ``k8s.io/pod-security-admission/policy`` (v0.37.2, the
``check_*.go`` files), with the versions each rule changed at and the baseline checks a
restricted one replaces (``registry.go``), run in the admission's order.

:func:`check_pod_security` names every offending field of a pod template with its check;
:func:`pod_security_detail` gives the text the API server refuses such a pod with (after
``violates PodSecurity "restricted:latest": ``), so a test can hold the two equal on a
corpus. A pod is read as the admission sees it, after the API server's defaulting and the
pod strategy's changes on create: with ``hostNetwork``, a port's ``hostPort`` is its
``containerPort`` (SetDefaults_Pod); a container with a deprecated AppArmor annotation and no
profile gets the annotation's (applyAppArmorVersionSkew).

Pure: the standard library only. :mod:`airflow_tfk.spec.platform_policy` builds the
platform's policy on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "LATEST_VERSION",
    "ContainerView",
    "Level",
    "PodView",
    "Violation",
    "check_pod_security",
    "host_ports",
    "parse_version",
    "pod_security_detail",
]


class Level(str, Enum):
    """A Pod Security Standards level (``pod-security.kubernetes.io/enforce``)."""

    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"


#: the newest Pod Security Standards version implemented here (k8s.io/pod-security-admission
#: v0.37.2); ``latest`` means it, as it does for an API server of that version. A newer API
#: server may add checks: bump this with the upstream package.
LATEST_VERSION = (1, 37)


@dataclass(frozen=True)
class Violation:
    """One field of a pod template (or of a training) that breaks one rule.

    :param field: the field's path, e.g. ``worker.template.spec.hostPID``.
    :param rule: ``pod-security/<upstream check id>`` or ``platform/<rule>``.
    :param message: what is wrong, in words.
    """

    field: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message} ({self.rule})"


# -- reading a pod defensively ------------------------------------------------------------
# The templates come from YAML that a user's template or patch may have shaped: every
# lookup tolerates a wrong type. A wrong type never makes a pod pass a "must be" rule (the
# API server would refuse it anyway), and a value that is neither the safe one nor absent
# counts as set.


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_set(value: Any) -> bool:
    """A boolean the API server would read as true (anything but absent, null, false)."""
    return value is not None and value is not False


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


@dataclass(frozen=True)
class ContainerView:
    path: str  # relative to the template: spec.containers[0]
    name: str
    body: Mapping[str, Any]
    kind: str  # initContainers, containers, ephemeralContainers
    #: the annotation the API server copied this container's AppArmor profile from
    apparmor_annotation: str | None = None

    @property
    def security(self) -> Mapping[str, Any] | None:
        sc = self.body.get("securityContext")
        return sc if isinstance(sc, Mapping) else None


@dataclass(frozen=True)
class PodView:
    """A pod template as the checks read it: metadata, spec and every container."""

    annotations: Mapping[str, Any]
    spec: Mapping[str, Any]
    containers: tuple[ContainerView, ...]

    @classmethod
    def of(cls, template: Mapping[str, Any]) -> PodView:
        spec = as_map(template.get("spec"))
        annotations = as_map(as_map(template.get("metadata")).get("annotations"))
        windows = as_map(spec.get("os")).get("name") == "windows"
        pod_profile = as_map(as_map(spec.get("securityContext")).get("appArmorProfile")) or None
        out = []
        # the order of visitContainers (visitor.go): init, regular, ephemeral
        for kind in ("initContainers", "containers", "ephemeralContainers"):
            for i, c in enumerate(as_list(spec.get(kind))):
                view = ContainerView(f"spec.{kind}[{i}]", as_text(as_map(c).get("name")), as_map(c), kind)
                out.append(view if windows else _apparmor_skew(view, annotations, pod_profile))
        return cls(annotations, spec, tuple(out))

    @property
    def security(self) -> Mapping[str, Any] | None:
        sc = self.spec.get("securityContext")
        return sc if isinstance(sc, Mapping) else None

    @property
    def windows(self) -> bool:
        return as_map(self.spec.get("os")).get("name") == "windows"

    @property
    def user_namespace(self) -> bool:
        # relaxPolicyForUserNamespacePod (helpers.go): hostUsers set to false
        return self.spec.get("hostUsers") is False


_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _apparmor_field(annotation: str) -> dict[str, str] | None:
    """podutil.ApparmorFieldForAnnotation, less the profiles the field's validation refuses."""
    if annotation == "unconfined":
        return {"type": "Unconfined"}
    if annotation == "runtime/default":
        return {"type": "RuntimeDefault"}
    if annotation.startswith("localhost/"):
        name = annotation[len("localhost/") :]
        if name and name == name.strip() and len(name) <= 4095:
            return {"type": "Localhost", "localhostProfile": name}
    return None


def _apparmor_skew(
    c: ContainerView, annotations: Mapping[str, Any], pod_profile: Mapping[str, Any] | None
) -> ContainerView:
    """The container as the admission sees it after the pod strategy's PrepareForCreate
    (applyAppArmorVersionSkew): a container with a deprecated AppArmor annotation and no
    profile of its own gets the annotation's profile, unless the pod's is the same."""
    key = _APPARMOR_ANNOTATION + c.name
    if key not in annotations or (c.security or {}).get("appArmorProfile") is not None:
        return c
    profile = _apparmor_field(as_text(annotations[key]))
    if profile is None or (pod_profile is not None and dict(pod_profile) == profile):
        return c
    security = {**(c.security or {}), "appArmorProfile": profile}
    return ContainerView(c.path, c.name, {**c.body, "securityContext": security}, c.kind, key)


# -- the upstream checks, one function each ----------------------------------------------
@dataclass(frozen=True)
class _Result:
    """A failed check: upstream's ForbiddenReason and ForbiddenDetail, and the fields."""

    reason: str
    detail: str
    fields: tuple[tuple[str, str], ...]  # (path relative to the template, message)


_CheckFn = Callable[[PodView], "_Result | None"]


def _join_quote(items: Sequence[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _go_quote(value: str) -> str:
    """Go's ``%q`` for the printable text an annotation holds."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _containers_text(names: Sequence[str]) -> str:
    return f"{_plural('container', 'containers', len(names))} {_join_quote(names)}"


def _allow_privilege_escalation(pod: PodView) -> _Result | None:
    bad, found = [], []
    for c in pod.containers:
        sc = c.security
        if sc is None or sc.get("allowPrivilegeEscalation") is not False:
            bad.append(c.name)
            found.append((f"{c.path}.securityContext.allowPrivilegeEscalation", "must be false"))
    if not bad:
        return None
    detail = f"{_containers_text(bad)} must set securityContext.allowPrivilegeEscalation=false"
    return _Result("allowPrivilegeEscalation != false", detail, tuple(found))


def _allow_privilege_escalation_1_25(pod: PodView) -> _Result | None:
    return None if pod.windows else _allow_privilege_escalation(pod)


def _apparmor_type_ok(profile: Mapping[str, Any]) -> bool:
    return profile.get("type") in ("RuntimeDefault", "Localhost")


def _apparmor(pod: PodView) -> _Result | None:
    setters: list[str] = []
    values: set[str] = set()
    found: list[tuple[str, str]] = []
    profile = (pod.security or {}).get("appArmorProfile")
    if profile is not None and not _apparmor_type_ok(as_map(profile)):
        setters.append("pod")
        values.add(as_text(as_map(profile).get("type")))
        found.append(("spec.securityContext.appArmorProfile.type", "must be RuntimeDefault or Localhost"))
    bad = []
    for c in pod.containers:
        profile = (c.security or {}).get("appArmorProfile")
        if profile is not None and not _apparmor_type_ok(as_map(profile)):
            bad.append(c.name)
            values.add(as_text(as_map(profile).get("type")))
            where = f"{c.path}.securityContext.appArmorProfile.type"
            if c.apparmor_annotation is not None:
                where = f"metadata.annotations['{c.apparmor_annotation}']"
            found.append((where, "must be RuntimeDefault or Localhost"))
    if bad:
        setters.append(_containers_text(bad))
    annotations = []
    for key, value in pod.annotations.items():
        text = as_text(value)
        if key.startswith(_APPARMOR_ANNOTATION) and not (
            text == "" or text == "runtime/default" or text.startswith("localhost/")
        ):
            annotations.append(f"{key}={_go_quote(text)}")
            found.append((f"metadata.annotations['{key}']", "must be runtime/default or localhost/*"))
    listed = sorted(values)
    if annotations:
        listed += sorted(annotations)
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    reason = _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed))
    detail = f"{' and '.join(setters)} must not set AppArmor profile type to {_join_quote(listed)}"
    return _Result(reason, detail, tuple(found))


_DEFAULT_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)


def _capabilities_baseline(pod: PodView) -> _Result | None:
    bad, caps, found = [], set(), []
    for c in pod.containers:
        sc = c.security
        if sc is None or sc.get("capabilities") is None:
            continue
        valid = True
        for j, cap in enumerate(as_list(as_map(sc.get("capabilities")).get("add"))):
            if as_text(cap) not in _DEFAULT_CAPABILITIES:
                valid = False
                caps.add(as_text(cap))
                found.append(
                    (f"{c.path}.securityContext.capabilities.add[{j}]", "is not a default capability")
                )
        if not valid:
            bad.append(c.name)
    if not bad:
        return None
    detail = (
        f"{_containers_text(bad)} must not include {_join_quote(sorted(caps))} "
        "in securityContext.capabilities.add"
    )
    return _Result("non-default capabilities", detail, tuple(found))


def _capabilities_restricted(pod: PodView) -> _Result | None:
    missing, adding, caps, found = [], [], set(), []
    for c in pod.containers:
        sc = c.security
        if sc is None or sc.get("capabilities") is None:
            missing.append(c.name)
            found.append((f"{c.path}.securityContext.capabilities.drop", 'must include "ALL"'))
            continue
        capabilities = as_map(sc.get("capabilities"))
        if "ALL" not in [as_text(d) for d in as_list(capabilities.get("drop"))]:
            missing.append(c.name)
            found.append((f"{c.path}.securityContext.capabilities.drop", 'must include "ALL"'))
        added = False
        for j, cap in enumerate(as_list(capabilities.get("add"))):
            if as_text(cap) != "NET_BIND_SERVICE":
                added = True
                caps.add(as_text(cap))
                found.append(
                    (f"{c.path}.securityContext.capabilities.add[{j}]", "may add only NET_BIND_SERVICE")
                )
        if added:
            adding.append(c.name)
    details = []
    if missing:
        details.append(f'{_containers_text(missing)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(
            f"{_containers_text(adding)} must not include {_join_quote(sorted(caps))} "
            "in securityContext.capabilities.add"
        )
    return _Result("unrestricted capabilities", "; ".join(details), tuple(found)) if details else None


def _capabilities_restricted_1_25(pod: PodView) -> _Result | None:
    return None if pod.windows else _capabilities_restricted(pod)


def _host_namespaces(pod: PodView) -> _Result | None:
    names = [f"{key}=true" for key in ("hostNetwork", "hostPID", "hostIPC") if _is_set(pod.spec.get(key))]
    if not names:
        return None
    found = tuple((f"spec.{n.split('=')[0]}", "must not share the host's namespace") for n in names)
    return _Result("host namespaces", ", ".join(names), found)


def pod_volumes(pod: PodView) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for i, v in enumerate(as_list(pod.spec.get("volumes"))):
        yield f"spec.volumes[{i}]", as_map(v)


def _host_path_volumes(pod: PodView) -> _Result | None:
    names, found = [], []
    for path, v in pod_volumes(pod):
        if v.get("hostPath") is not None:
            names.append(as_text(v.get("name")))
            found.append((f"{path}.hostPath", "hostPath volumes are forbidden"))
    if not names:
        return None
    return _Result(
        "hostPath volumes", f"{_plural('volume', 'volumes', len(names))} {_join_quote(names)}", tuple(found)
    )


#: the volume sources restricted allows, in restrictedVolumes_1_0's order
_RESTRICTED_VOLUME_SOURCES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
#: the others, in the order restrictedVolumes_1_0 names the first one a volume has
_OTHER_VOLUME_SOURCES = (
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
)


def _restricted_volumes(pod: PodView) -> _Result | None:
    names, types, found = [], set(), []
    for path, v in pod_volumes(pod):
        if any(v.get(s) is not None for s in _RESTRICTED_VOLUME_SOURCES):
            continue
        names.append(as_text(v.get("name")))
        kind = next((s for s in _OTHER_VOLUME_SOURCES if v.get(s) is not None), "unknown")
        types.add(kind)
        where = f"{path}.{kind}" if kind != "unknown" else path
        found.append((where, f"{kind} volumes are not allowed by restricted"))
    if not names:
        return None
    detail = (
        f"{_plural('volume', 'volumes', len(names))} {_join_quote(names)} "
        f"{_plural('uses', 'use', len(names))} "
        f"{_plural('restricted volume type', 'restricted volume types', len(types))} "
        f"{_join_quote(sorted(types))}"
    )
    return _Result("restricted volume types", detail, tuple(found))


def host_ports(pod: PodView) -> Iterator[tuple[ContainerView, str, Any]]:
    """``(container, path, hostPort)`` of every port with a host port, as the API server
    sees the pod: with hostNetwork, a port's hostPort defaults to its containerPort
    (SetDefaultsPodView, for init and regular containers)."""
    host_network = pod.spec.get("hostNetwork") is True
    for c in pod.containers:
        for j, port in enumerate(as_list(c.body.get("ports"))):
            p = as_map(port)
            host = p.get("hostPort")
            if host_network and c.kind != "ephemeralContainers" and host in (None, 0):
                host = p.get("containerPort")
            if host not in (None, 0):
                yield c, f"{c.path}.ports[{j}].hostPort", host


def _host_ports(pod: PodView) -> _Result | None:
    bad: list[str] = []
    ports: set[str] = set()
    found = []
    for c in pod.containers:
        own = [(path, host) for k, path, host in host_ports(pod) if k is c]
        if own:
            bad.append(c.name)
        for path, host in own:
            ports.add(as_text(host))
            found.append((path, "host ports are forbidden"))
    if not bad:
        return None
    detail = (
        f"{_containers_text(bad)} {_plural('uses', 'use', len(bad))} "
        f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}"
    )
    return _Result("hostPort", detail, tuple(found))


_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _handler_hosts(handler: Any, path: str) -> list[tuple[str, str]]:
    out = []
    for action in ("httpGet", "tcpSocket"):
        host = as_map(as_map(handler).get(action)).get("host")
        if host not in (None, ""):
            out.append((f"{path}.{action}.host", as_text(host)))
    return out


def _host_probes(pod: PodView) -> _Result | None:
    bad: set[str] = set()
    hosts: set[str] = set()
    found = []
    for c in pod.containers:
        handlers = [(c.body.get(p), f"{c.path}.{p}") for p in _PROBES]
        lifecycle = as_map(c.body.get("lifecycle"))
        handlers += [(lifecycle.get(h), f"{c.path}.lifecycle.{h}") for h in ("postStart", "preStop")]
        for handler, path in handlers:
            for where, host in _handler_hosts(handler, path):
                bad.add(c.name)
                hosts.add(host)
                found.append((where, "must not name a host"))
    if not bad:
        return None
    detail = (
        f"{_containers_text(sorted(bad))} {_plural('uses', 'use', len(bad))} "
        f"{_plural('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
        f"{_join_quote(sorted(hosts))}"
    )
    return _Result("probe or lifecycle host", detail, tuple(found))


def _privileged(pod: PodView) -> _Result | None:
    bad, found = [], []
    for c in pod.containers:
        if _is_set((c.security or {}).get("privileged")):
            bad.append(c.name)
            found.append((f"{c.path}.securityContext.privileged", "must not be true"))
    if not bad:
        return None
    return _Result(
        "privileged", f"{_containers_text(bad)} must not set securityContext.privileged=true", tuple(found)
    )


def _proc_mount(pod: PodView) -> _Result | None:
    bad, types, found = [], set(), []
    for c in pod.containers:
        value = (c.security or {}).get("procMount")
        if value is not None and value != "Default":
            bad.append(c.name)
            types.add(as_text(value))
            found.append((f"{c.path}.securityContext.procMount", "must be Default"))
    if not bad:
        return None
    detail = f"{_containers_text(bad)} must not set securityContext.procMount to {_join_quote(sorted(types))}"
    return _Result("procMount", detail, tuple(found))


def _proc_mount_1_35(pod: PodView) -> _Result | None:
    return None if pod.user_namespace else _proc_mount(pod)


_SELINUX_TYPES_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
_SELINUX_TYPES_1_31 = _SELINUX_TYPES_1_0 | {"container_engine_t"}


def _selinux(allowed: frozenset[str]) -> _CheckFn:
    def check(pod: PodView) -> _Result | None:
        types: set[str] = set()
        user = role = False
        found: list[tuple[str, str]] = []

        def valid(opts: Mapping[str, Any], path: str) -> bool:
            nonlocal user, role
            ok = True
            if as_text(opts.get("type")) not in allowed:
                ok = False
                types.add(as_text(opts.get("type")))
                found.append((f"{path}.type", "is not an allowed SELinux type"))
            for key in ("user", "role"):
                if as_text(opts.get(key)):
                    ok = False
                    user, role = (True, role) if key == "user" else (user, True)
                    found.append((f"{path}.{key}", "may not be set"))
            return ok

        setters = []
        opts = (pod.security or {}).get("seLinuxOptions")
        if opts is not None and not valid(as_map(opts), "spec.securityContext.seLinuxOptions"):
            setters.append("pod")
        bad = []
        for c in pod.containers:
            opts = (c.security or {}).get("seLinuxOptions")
            if opts is not None and not valid(as_map(opts), f"{c.path}.securityContext.seLinuxOptions"):
                bad.append(c.name)
        if bad:
            setters.append(_containers_text(bad))
        if not setters:
            return None
        data = [f"{_plural('type', 'types', len(types))} {_join_quote(sorted(types))}"] if types else []
        data += ["user may not be set"] if user else []
        data += ["role may not be set"] if role else []
        detail = f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}"
        return _Result("seLinuxOptions", detail, tuple(found))

    return check


_SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_CONTAINER_ANNOTATION = "container.seccomp.security.alpha.kubernetes.io/"


def _seccomp_annotations(pod: PodView) -> _Result | None:
    def ok(value: str) -> bool:
        return value in ("runtime/default", "docker/default") or value.startswith("localhost/")

    forbidden: set[str] = set()
    found = []
    keys = [_SECCOMP_POD_ANNOTATION] + [_SECCOMP_CONTAINER_ANNOTATION + c.name for c in pod.containers]
    for key in keys:
        if key in pod.annotations and not ok(as_text(pod.annotations[key])):
            forbidden.add(f"{key}={_go_quote(as_text(pod.annotations[key]))}")
            found.append((f"metadata.annotations['{key}']", "must be runtime/default or localhost/*"))
    if not forbidden:
        return None
    detail = (
        f"forbidden {_plural('annotation', 'annotations', len(forbidden))} {', '.join(sorted(forbidden))}"
    )
    return _Result("seccompProfile", detail, tuple(found))


def _seccomp_ok(profile: Mapping[str, Any]) -> bool:
    return profile.get("type") in ("Localhost", "RuntimeDefault")


def _seccomp(restricted: bool) -> _CheckFn:
    """seccompProfileBaseline_1_19, or seccompProfileRestricted_1_19 (every container must
    have a valid profile, its own or the pod's)."""

    def check(pod: PodView) -> _Result | None:
        setters, values, found = [], set(), []
        pod_set = False
        profile = (pod.security or {}).get("seccompProfile")
        if profile is not None:
            if _seccomp_ok(as_map(profile)):
                pod_set = True
            else:
                setters.append("pod")
                values.add(as_text(as_map(profile).get("type")))
                found.append(
                    ("spec.securityContext.seccompProfile.type", "must be RuntimeDefault or Localhost")
                )
        bad, implicit = [], []
        for c in pod.containers:
            profile = (c.security or {}).get("seccompProfile")
            if profile is not None:
                if not _seccomp_ok(as_map(profile)):
                    bad.append(c.name)
                    values.add(as_text(as_map(profile).get("type")))
                    found.append(
                        (
                            f"{c.path}.securityContext.seccompProfile.type",
                            "must be RuntimeDefault or Localhost",
                        )
                    )
            elif restricted and not pod_set:
                implicit.append(c.name)
                found.append(
                    (
                        f"{c.path}.securityContext.seccompProfile",
                        "must be set, here or for the pod (RuntimeDefault)",
                    )
                )
        if bad:
            setters.append(_containers_text(bad))
        if setters:
            detail = (
                f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
                f"{_join_quote(sorted(values))}"
            )
            return _Result("seccompProfile", detail, tuple(found))
        if implicit:
            detail = (
                f"pod or {_containers_text(implicit)} must set securityContext.seccompProfile.type to "
                '"RuntimeDefault" or "Localhost"'
            )
            return _Result("seccompProfile", detail, tuple(found))
        return None

    return check


def _seccomp_restricted_1_25(pod: PodView) -> _Result | None:
    return None if pod.windows else _seccomp(True)(pod)


_SYSCTLS_1_0 = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    }
)
_SYSCTLS_1_27 = _SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
_SYSCTLS_1_29 = _SYSCTLS_1_27 | {
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
_SYSCTLS_1_32 = _SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
_SYSCTLS_1_37 = _SYSCTLS_1_32 | {"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}


def _sysctls(allowed: frozenset[str]) -> _CheckFn:
    def check(pod: PodView) -> _Result | None:
        bad, found = [], []
        for i, sysctl in enumerate(as_list((pod.security or {}).get("sysctls"))):
            name = as_text(as_map(sysctl).get("name"))
            if name not in allowed:
                bad.append(name)
                found.append((f"spec.securityContext.sysctls[{i}].name", "is not a safe sysctl"))
        return _Result("forbidden sysctls", ", ".join(bad), tuple(found)) if bad else None

    return check


def _windows_host_process(pod: PodView) -> _Result | None:
    setters, found = [], []
    if as_map((pod.security or {}).get("windowsOptions")).get("hostProcess") is True:
        setters.append("pod")
        found.append(("spec.securityContext.windowsOptions.hostProcess", "must not be true"))
    bad = []
    for c in pod.containers:
        if as_map((c.security or {}).get("windowsOptions")).get("hostProcess") is True:
            bad.append(c.name)
            found.append((f"{c.path}.securityContext.windowsOptions.hostProcess", "must not be true"))
    if bad:
        setters.append(_containers_text(bad))
    if not setters:
        return None
    detail = f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true"
    return _Result("hostProcess", detail, tuple(found))


def _run_as_non_root(pod: PodView) -> _Result | None:
    setters, found = [], []
    pod_non_root = False
    value = (pod.security or {}).get("runAsNonRoot")
    if value is not None:
        if value is True:
            pod_non_root = True
        else:
            setters.append("pod")
            found.append(("spec.securityContext.runAsNonRoot", "must not be false"))
    explicit, implicit = [], []
    for c in pod.containers:
        value = (c.security or {}).get("runAsNonRoot")
        if value is not None:
            if value is not True:
                explicit.append(c.name)
                found.append((f"{c.path}.securityContext.runAsNonRoot", "must not be false"))
        elif not pod_non_root:
            implicit.append(c.name)
            found.append((f"{c.path}.securityContext.runAsNonRoot", "must be true, here or for the pod"))
    if explicit:
        setters.append(_containers_text(explicit))
    if setters:
        detail = f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
        return _Result("runAsNonRoot != true", detail, tuple(found))
    if implicit:
        detail = f"pod or {_containers_text(implicit)} must set securityContext.runAsNonRoot=true"
        return _Result("runAsNonRoot != true", detail, tuple(found))
    return None


def _run_as_non_root_1_35(pod: PodView) -> _Result | None:
    return None if pod.user_namespace else _run_as_non_root(pod)


def _root_uid(value: Any) -> bool:
    # uid 0; a value of another type than an integer is refused by the API server, and is
    # named here rather than trusted
    return value is not None and (type(value) is not int or value == 0)


def _run_as_user(pod: PodView) -> _Result | None:
    setters, found = [], []
    if _root_uid((pod.security or {}).get("runAsUser")):
        setters.append("pod")
        found.append(("spec.securityContext.runAsUser", "must not be 0 (root)"))
    bad = []
    for c in pod.containers:
        if _root_uid((c.security or {}).get("runAsUser")):
            bad.append(c.name)
            found.append((f"{c.path}.securityContext.runAsUser", "must not be 0 (root)"))
    if bad:
        setters.append(_containers_text(bad))
    if not setters:
        return None
    return _Result("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0", tuple(found))


def _run_as_user_1_35(pod: PodView) -> _Result | None:
    return None if pod.user_namespace else _run_as_user(pod)


@dataclass(frozen=True)
class _Versioned:
    since: tuple[int, int]
    check: _CheckFn
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Check:
    id: str
    level: Level
    versions: tuple[_Versioned, ...]


_B, _R = Level.BASELINE, Level.RESTRICTED
#: every check of k8s.io/pod-security-admission v0.37.2 (policy/check_*.go), with its
#: versions and the baseline checks a restricted one replaces
_CHECKS: tuple[_Check, ...] = (
    _Check(
        "allowPrivilegeEscalation",
        _R,
        (
            _Versioned((1, 8), _allow_privilege_escalation),
            _Versioned((1, 25), _allow_privilege_escalation_1_25),
        ),
    ),
    _Check("appArmorProfile", _B, (_Versioned((1, 0), _apparmor),)),
    _Check("capabilities_baseline", _B, (_Versioned((1, 0), _capabilities_baseline),)),
    _Check(
        "capabilities_restricted",
        _R,
        (
            _Versioned((1, 22), _capabilities_restricted, ("capabilities_baseline",)),
            _Versioned((1, 25), _capabilities_restricted_1_25, ("capabilities_baseline",)),
        ),
    ),
    _Check("hostNamespaces", _B, (_Versioned((1, 0), _host_namespaces),)),
    _Check("hostPathVolumes", _B, (_Versioned((1, 0), _host_path_volumes),)),
    _Check("hostPorts", _B, (_Versioned((1, 0), _host_ports),)),
    _Check("hostProbesAndHostLifecycle", _B, (_Versioned((1, 34), _host_probes),)),
    _Check("privileged", _B, (_Versioned((1, 0), _privileged),)),
    _Check("procMount", _B, (_Versioned((1, 0), _proc_mount), _Versioned((1, 35), _proc_mount_1_35))),
    _Check("procMount_restricted", _R, (_Versioned((1, 35), _proc_mount, ("procMount",)),)),
    _Check("restrictedVolumes", _R, (_Versioned((1, 0), _restricted_volumes, ("hostPathVolumes",)),)),
    _Check(
        "runAsNonRoot", _R, (_Versioned((1, 0), _run_as_non_root), _Versioned((1, 35), _run_as_non_root_1_35))
    ),
    _Check("runAsUser", _R, (_Versioned((1, 23), _run_as_user), _Versioned((1, 35), _run_as_user_1_35))),
    _Check(
        "seLinuxOptions",
        _B,
        (
            _Versioned((1, 0), _selinux(_SELINUX_TYPES_1_0)),
            _Versioned((1, 31), _selinux(_SELINUX_TYPES_1_31)),
        ),
    ),
    _Check(
        "seccompProfile_baseline",
        _B,
        (_Versioned((1, 0), _seccomp_annotations), _Versioned((1, 19), _seccomp(False))),
    ),
    _Check(
        "seccompProfile_restricted",
        _R,
        (
            _Versioned((1, 19), _seccomp(True), ("seccompProfile_baseline",)),
            _Versioned((1, 25), _seccomp_restricted_1_25, ("seccompProfile_baseline",)),
        ),
    ),
    _Check(
        "sysctls",
        _B,
        (
            _Versioned((1, 0), _sysctls(_SYSCTLS_1_0)),
            _Versioned((1, 27), _sysctls(_SYSCTLS_1_27)),
            _Versioned((1, 29), _sysctls(_SYSCTLS_1_29)),
            _Versioned((1, 32), _sysctls(_SYSCTLS_1_32)),
            _Versioned((1, 37), _sysctls(_SYSCTLS_1_37)),
        ),
    ),
    _Check("windowsHostProcess", _B, (_Versioned((1, 0), _windows_host_process),)),
)


def _at(check: _Check, version: tuple[int, int]) -> _Versioned | None:
    current = None
    for v in check.versions:
        if v.since <= version:
            current = v
    return current


def _checks_for(level: Level, version: tuple[int, int]) -> list[tuple[str, _CheckFn]]:
    """The checks the API server runs for ``level`` at ``version`` (registry.go's populate
    and EvaluatePod): baseline checks by id, then restricted ones by id; at restricted,
    a baseline check a restricted one overrides at that version is left out."""
    if level is Level.PRIVILEGED:
        return []
    version = min(version, LATEST_VERSION)
    active = {c.id: (c, v) for c in _CHECKS if (v := _at(c, version)) is not None}
    baseline = sorted(i for i, (c, _) in active.items() if c.level is Level.BASELINE)
    if level is Level.BASELINE:
        return [(i, active[i][1].check) for i in baseline]
    restricted = sorted(i for i, (c, _) in active.items() if c.level is Level.RESTRICTED)
    overridden = {o for i in restricted for o in active[i][1].overrides}
    return [(i, active[i][1].check) for i in baseline + restricted if i not in overridden]


_VERSION = re.compile(r"^v?1\.(0|[1-9][0-9]{0,3})$")


def parse_version(version: str | tuple[int, int]) -> tuple[int, int]:
    """``latest`` or ``v1.N`` (the ``enforce-version`` label's syntax) as ``(1, N)``."""
    if isinstance(version, tuple):
        return version
    if version == "latest":
        return LATEST_VERSION
    m = _VERSION.match(version)
    if m is None:
        raise ValueError(f"{version!r} is not a Pod Security version (latest, or v1.N such as v1.29)")
    return 1, int(m.group(1))


def _results(
    template: Mapping[str, Any], level: Level | str, version: str | tuple[int, int]
) -> list[tuple[str, _Result]]:
    pod = PodView.of(template)
    out = []
    for check_id, check in _checks_for(Level(level), parse_version(version)):
        result = check(pod)
        if result is not None:
            out.append((check_id, result))
    return out


def pod_security_detail(
    template: Mapping[str, Any],
    level: Level | str = Level.RESTRICTED,
    version: str | tuple[int, int] = "latest",
) -> str | None:
    """What the API server's PodSecurity admission says when it refuses a pod of this
    template (``AggregateCheckResult.ForbiddenDetail``: the text after ``violates
    PodSecurity "restricted:latest": ``), or None when it admits it."""
    parts = []
    for _, r in _results(template, level, version):
        parts.append(f"{r.reason} ({r.detail})" if r.detail else r.reason)
    return ", ".join(parts) or None


def check_pod_security(
    template: Mapping[str, Any],
    level: Level | str = Level.RESTRICTED,
    version: str | tuple[int, int] = "latest",
    *,
    where: str = "",
) -> list[Violation]:
    """Every field of a pod template (or a Pod) that breaks the Pod Security Standard at
    ``level``, as the API server's PodSecurity admission at ``version`` judges it. A pod is
    refused by the admission exactly when this list is not empty."""
    prefix = f"{where}." if where else ""
    out = []
    for check_id, r in _results(template, level, version):
        for path, message in r.fields:
            out.append(
                Violation(prefix + path, f"pod-security/{check_id}", f"{message} ({r.reason}: {r.detail})")
            )
    return out
