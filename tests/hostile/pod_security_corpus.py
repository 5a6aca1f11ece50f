"""A generated corpus of hostile pods (issue 35): what a spec, a training file or a template
override can put in a training's pods, each a case with the Pod Security checks it breaks.

Every hostile setting (an :class:`Atom`) goes through every way of reaching a pod that
can carry it (a *channel*): a sidecar, an init container, a role's sidecar (JobSet layout,
parameter-server mode: two pod templates), the cluster's or a role's ``template_patch`` of
the training container, ``pod.volumes``, ``pod.annotations``, and a template override (a
``template_dir`` whose macros print any pod: here, the rendered template edited by hand).
Controls sit among them (a setting the level allows), so both verdicts are exercised.

Each atom is applied over the platform's own hardening (a sidecar gets the training
container's security context, then the atom's changes; ``None`` removes a key), so the
checks it breaks are the atom's alone, written here by hand from the Pod Security
Standards: ``baseline`` and ``restricted`` (the check ids of
``k8s.io/pod-security-admission``), and the fields, relative to the container or the pod
template, that must be named.

Deterministic: the same list, in the same order, on every call. Shared by the offline test
(tests/spec/test_pod_security_corpus.py) and the control-plane one
(tests/k8s_integration/test_pod_security_parity.py).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

IMAGE = "registry.example/tfk/train:1"
SIDE_IMAGE = "registry.example/tfk/agent:1"
BASE: dict[str, Any] = {
    "name": "pss",
    "image": IMAGE,
    "command": ["python", "/opt/train.py"],
    "mode": "all_reduce",
    "worker": {"replicas": 2},
}
#: the parameter-server variant: a JobSet of three roles, the atom in the worker's pods only
BASE_PS: dict[str, Any] = {
    **BASE,
    "mode": "parameter_server",
    "layout": "jobset",
    "chief": {"replicas": 1},
    "ps": {"replicas": 1},
    "worker": {"replicas": 2},
}
#: the training container's security context (templates/_macros.yaml.j2)
HARDENED: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}

# the restricted profile's names for baseline checks it replaces
_RESTRICTED_OF = {
    "capabilities_baseline": "capabilities_restricted",
    "hostPathVolumes": "restrictedVolumes",
    "seccompProfile_baseline": "seccompProfile_restricted",
    "procMount": "procMount_restricted",
}


@dataclass(frozen=True)
class Atom:
    """One hostile (or control) setting.

    :param id: a short name.
    :param security: changes to a container's security context (``None`` removes a key).
    :param container: other fields of the container (ports, probes, lifecycle).
    :param pod: changes to the pod spec (``None`` removes a key; ``securityContext`` merges).
    :param volume: a volume added to the pod.
    :param annotations: annotations of the pod.
    :param baseline: the baseline checks it breaks.
    :param restricted_only: the restricted checks it breaks beyond those (a baseline check
        restricted replaces is renamed by itself).
    :param fields: the fields that must be named, relative to the container (``.x``) or
        the template (``spec.x``, ``metadata.x``).
    """

    id: str
    security: Mapping[str, Any] | None = None
    container: Mapping[str, Any] | None = None
    pod: Mapping[str, Any] | None = None
    volume: Mapping[str, Any] | None = None
    annotations: Mapping[str, str] | None = None
    baseline: frozenset[str] = frozenset()
    restricted_only: frozenset[str] = frozenset()
    fields: tuple[str, ...] = ()

    @property
    def restricted(self) -> frozenset[str]:
        return frozenset(_RESTRICTED_OF.get(c, c) for c in self.baseline) | self.restricted_only


def _a(id: str, *, b: str = "", r: str = "", f: str = "", **kw: Any) -> Atom:
    return Atom(
        id,
        baseline=frozenset(b.split()),
        restricted_only=frozenset(r.split()),
        fields=tuple(f.split()),
        **kw,
    )


# -- container atoms: security context, ports, probes, lifecycle ---------------------------
CONTAINER_ATOMS: tuple[Atom, ...] = (
    _a("hardened"),
    _a(
        "privileged",
        security={"privileged": True, "allowPrivilegeEscalation": None},
        b="privileged",
        r="allowPrivilegeEscalation",
        f=".securityContext.privileged .securityContext.allowPrivilegeEscalation",
    ),
    _a(
        "privileged-root",
        security={
            "privileged": True,
            "allowPrivilegeEscalation": True,
            "runAsUser": 0,
            "runAsNonRoot": False,
        },
        b="privileged",
        r="allowPrivilegeEscalation runAsNonRoot runAsUser",
        f=".securityContext.privileged .securityContext.runAsUser .securityContext.runAsNonRoot",
    ),
    _a(
        "escalation",
        security={"allowPrivilegeEscalation": True},
        r="allowPrivilegeEscalation",
        f=".securityContext.allowPrivilegeEscalation",
    ),
    _a(
        "escalation-unset",
        security={"allowPrivilegeEscalation": None},
        r="allowPrivilegeEscalation",
        f=".securityContext.allowPrivilegeEscalation",
    ),
    _a(
        "cap-sys-admin",
        security={"capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}},
        b="capabilities_baseline",
        f=".securityContext.capabilities.add[0]",
    ),
    _a(
        "cap-net-admin",
        security={"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}},
        b="capabilities_baseline",
        f=".securityContext.capabilities.add[0]",
    ),
    _a(
        "cap-net-raw",
        security={"capabilities": {"add": ["NET_RAW"], "drop": ["ALL"]}},
        b="capabilities_baseline",
        f=".securityContext.capabilities.add[0]",
    ),
    _a(
        "cap-all",
        security={"capabilities": {"add": ["ALL"], "drop": ["ALL"]}},
        b="capabilities_baseline",
        f=".securityContext.capabilities.add[0]",
    ),
    _a(
        "cap-sys-ptrace-bpf",
        security={"capabilities": {"add": ["SYS_PTRACE", "BPF", "CHOWN"], "drop": ["ALL"]}},
        b="capabilities_baseline",
        f=".securityContext.capabilities.add[0] .securityContext.capabilities.add[1]",
    ),
    _a(
        "cap-lowercase",
        security={"capabilities": {"add": ["sys_admin"], "drop": ["ALL"]}},
        b="capabilities_baseline",
        f=".securityContext.capabilities.add[0]",
    ),
    _a(
        "cap-prefixed",
        security={"capabilities": {"add": ["CAP_NET_ADMIN"], "drop": ["ALL"]}},
        b="capabilities_baseline",
        f=".securityContext.capabilities.add[0]",
    ),
    # the API server refuses CAP_SYS_ADMIN beside allowPrivilegeEscalation=false (a validation
    # rule, before Pod Security): the hostile spec lets it escalate too
    _a(
        "cap-prefixed-sys-admin",
        security={
            "capabilities": {"add": ["CAP_SYS_ADMIN"], "drop": ["ALL"]},
            "allowPrivilegeEscalation": None,
        },
        b="capabilities_baseline",
        r="allowPrivilegeEscalation",
        f=".securityContext.capabilities.add[0] .securityContext.allowPrivilegeEscalation",
    ),
    _a(
        "cap-default-chown",
        security={"capabilities": {"add": ["CHOWN"], "drop": ["ALL"]}},
        r="capabilities_restricted",
        f=".securityContext.capabilities.add[0]",
    ),
    _a(
        "cap-default-setuid-kill",
        security={"capabilities": {"add": ["SETUID", "KILL"], "drop": ["ALL"]}},
        r="capabilities_restricted",
        f=".securityContext.capabilities.add[0] .securityContext.capabilities.add[1]",
    ),
    _a("cap-net-bind-service", security={"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}),
    _a(
        "drop-nothing",
        security={"capabilities": {"drop": []}},
        r="capabilities_restricted",
        f=".securityContext.capabilities.drop",
    ),
    _a(
        "drop-net-raw-only",
        security={"capabilities": {"drop": ["NET_RAW"]}},
        r="capabilities_restricted",
        f=".securityContext.capabilities.drop",
    ),
    _a(
        "drop-all-lowercase",
        security={"capabilities": {"drop": ["all"]}},
        r="capabilities_restricted",
        f=".securityContext.capabilities.drop",
    ),
    _a(
        "capabilities-unset",
        security={"capabilities": None},
        r="capabilities_restricted",
        f=".securityContext.capabilities.drop",
    ),
    _a("run-as-root", security={"runAsUser": 0}, r="runAsUser", f=".securityContext.runAsUser"),
    _a(
        "run-as-root-nonroot-unset",
        security={"runAsUser": 0, "runAsNonRoot": None},
        r="runAsUser",
        f=".securityContext.runAsUser",
    ),
    _a(
        "run-as-non-root-false",
        security={"runAsNonRoot": False},
        r="runAsNonRoot",
        f=".securityContext.runAsNonRoot",
    ),
    _a("run-as-group-root", security={"runAsGroup": 0}),
    _a("run-as-user-other", security={"runAsUser": 4242, "runAsGroup": 4242}),
    _a(
        "seccomp-unconfined",
        security={"seccompProfile": {"type": "Unconfined"}},
        b="seccompProfile_baseline",
        f=".securityContext.seccompProfile.type",
    ),
    _a("seccomp-unset", security={"seccompProfile": None}),
    _a(
        "seccomp-localhost",
        security={"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/tfk.json"}},
    ),
    _a(
        "selinux-spc",
        security={"seLinuxOptions": {"type": "spc_t"}},
        b="seLinuxOptions",
        f=".securityContext.seLinuxOptions.type",
    ),
    _a(
        "selinux-user",
        security={"seLinuxOptions": {"user": "system_u"}},
        b="seLinuxOptions",
        f=".securityContext.seLinuxOptions.user",
    ),
    _a(
        "selinux-role",
        security={"seLinuxOptions": {"role": "sysadm_r", "type": "unconfined_t"}},
        b="seLinuxOptions",
        f=".securityContext.seLinuxOptions.role .securityContext.seLinuxOptions.type",
    ),
    _a("selinux-container-t", security={"seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"}}),
    # allowed since 1.31: a namespace pinned to v1.29 refuses it (the parity test's pinned run)
    _a("selinux-engine-t", security={"seLinuxOptions": {"type": "container_engine_t"}}),
    _a(
        "apparmor-unconfined",
        security={"appArmorProfile": {"type": "Unconfined"}},
        b="appArmorProfile",
        f=".securityContext.appArmorProfile.type",
    ),
    _a("apparmor-runtime-default", security={"appArmorProfile": {"type": "RuntimeDefault"}}),
    _a(
        "apparmor-localhost",
        security={"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-tfk"}},
    ),
    _a(
        "host-port",
        container={"ports": [{"containerPort": 8080, "hostPort": 8080}]},
        b="hostPorts",
        f=".ports[0].hostPort",
    ),
    _a(
        "host-port-ip",
        container={
            "ports": [{"containerPort": 9100, "hostPort": 9100, "hostIP": "0.0.0.0", "protocol": "UDP"}]
        },
        b="hostPorts",
        f=".ports[0].hostPort",
    ),
    _a(
        "host-ports-two",
        container={
            "ports": [{"containerPort": 80, "hostPort": 80}, {"containerPort": 443, "hostPort": 10443}]
        },
        b="hostPorts",
        f=".ports[0].hostPort .ports[1].hostPort",
    ),
    _a("container-port-only", container={"ports": [{"containerPort": 9090}]}),
    _a(
        "probe-metadata-host",
        container={"livenessProbe": {"httpGet": {"host": "169.254.169.254", "path": "/latest", "port": 80}}},
        b="hostProbesAndHostLifecycle",
        f=".livenessProbe.httpGet.host",
    ),
    _a(
        "probe-tcp-host",
        container={"readinessProbe": {"tcpSocket": {"host": "10.96.0.1", "port": 443}}},
        b="hostProbesAndHostLifecycle",
        f=".readinessProbe.tcpSocket.host",
    ),
    _a(
        "probe-startup-host",
        container={"startupProbe": {"httpGet": {"host": "kubernetes.default.svc", "port": 443}}},
        b="hostProbesAndHostLifecycle",
        f=".startupProbe.httpGet.host",
    ),
    _a(
        "prestop-host",
        container={
            "lifecycle": {"preStop": {"httpGet": {"host": "10.0.0.10", "path": "/drain", "port": 8080}}}
        },
        b="hostProbesAndHostLifecycle",
        f=".lifecycle.preStop.httpGet.host",
    ),
    _a(
        "probe-own-pod",
        container={"livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}}},
    ),
    _a(
        "proc-mount-default",
        security={"procMount": "Default"},
    ),
    _a("writable-root", security={"readOnlyRootFilesystem": False}),
    _a(
        "privileged-sys-admin-root",
        security={
            "privileged": True,
            "allowPrivilegeEscalation": True,
            "capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]},
            "runAsUser": 0,
            "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
        },
        container={"ports": [{"containerPort": 22, "hostPort": 2222}]},
        b="privileged capabilities_baseline seccompProfile_baseline appArmorProfile hostPorts",
        r="allowPrivilegeEscalation runAsUser",
        f=".securityContext.privileged .securityContext.capabilities.add[0] .ports[0].hostPort",
    ),
)

# -- pod atoms: namespaces, pod security context, node, token -----------------------------
POD_ATOMS: tuple[Atom, ...] = (
    _a("host-ipc", pod={"hostIPC": True}, b="hostNamespaces", f="spec.hostIPC"),
    _a(
        "pod-run-as-root",
        pod={"securityContext": {"runAsUser": 0}},
        r="runAsUser",
        f="spec.securityContext.runAsUser",
    ),
    _a(
        "pod-run-as-non-root-false",
        pod={"securityContext": {"runAsNonRoot": False}},
        r="runAsNonRoot",
        f="spec.securityContext.runAsNonRoot",
    ),
    _a(
        "pod-root-both",
        pod={"securityContext": {"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0, "fsGroup": 0}},
        r="runAsNonRoot runAsUser",
        f="spec.securityContext.runAsNonRoot spec.securityContext.runAsUser",
    ),
    _a(
        "pod-seccomp-unconfined",
        pod={"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        b="seccompProfile_baseline",
        f="spec.securityContext.seccompProfile.type",
    ),
    _a("pod-seccomp-removed", pod={"securityContext": {"seccompProfile": None}}),
    _a("pod-run-as-non-root-removed", pod={"securityContext": {"runAsNonRoot": None}}),
    _a(
        "pod-selinux-spc",
        pod={"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "root"}}},
        b="seLinuxOptions",
        f="spec.securityContext.seLinuxOptions.type spec.securityContext.seLinuxOptions.user",
    ),
    _a(
        "pod-apparmor-unconfined",
        pod={"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
        b="appArmorProfile",
        f="spec.securityContext.appArmorProfile.type",
    ),
    _a(
        "sysctl-unsafe",
        pod={"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}},
        b="sysctls",
        f="spec.securityContext.sysctls[0].name",
    ),
    _a(
        "sysctl-net-unsafe",
        pod={
            "securityContext": {
                "sysctls": [
                    {"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"},
                    {"name": "net.core.somaxconn", "value": "4096"},
                ]
            }
        },
        b="sysctls",
        f="spec.securityContext.sysctls[1].name",
    ),
    _a(
        "sysctl-safe",
        pod={"securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}},
    ),
    _a(
        "sysctl-keepalive-1-29",
        pod={"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "600"}]}},
    ),
    # allowed since 1.32 and 1.37: a v1.29 namespace refuses them
    _a(
        "sysctl-rmem-1-32",
        pod={"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]}},
    ),
    _a(
        "sysctl-notsent-1-37",
        pod={"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_notsent_lowat", "value": "16384"}]}},
    ),
    _a("node-name", pod={"nodeName": "node-0"}),
    _a("token-automount", pod={"automountServiceAccountToken": True}),
    _a("user-namespace", pod={"hostUsers": False}),
    # in a user namespace, root in the pod is not root on the node: allowed since 1.35
    _a(
        "user-namespace-root",
        pod={"hostUsers": False, "securityContext": {"runAsUser": 0, "runAsNonRoot": False}},
    ),
    _a(
        "host-ipc-and-root",
        pod={"hostIPC": True, "securityContext": {"runAsUser": 0}},
        b="hostNamespaces",
        r="runAsUser",
        f="spec.hostIPC spec.securityContext.runAsUser",
    ),
)

#: pod atoms only a template override can carry (the spec refuses hostNetwork and the
#: pod's shareProcessNamespace, without which hostPID is valid)
OVERRIDE_POD_ATOMS: tuple[Atom, ...] = (
    # SetDefaults_Pod: with hostNetwork, every port's hostPort is its containerPort
    _a(
        "host-network",
        pod={"hostNetwork": True},
        b="hostNamespaces hostPorts",
        f="spec.hostNetwork spec.containers[0].ports[0].hostPort",
    ),
    _a(
        "host-pid",
        pod={"hostPID": True, "shareProcessNamespace": None},
        b="hostNamespaces",
        f="spec.hostPID",
    ),
    _a(
        "host-everything",
        pod={"hostPID": True, "hostIPC": True, "hostNetwork": True, "shareProcessNamespace": None},
        b="hostNamespaces hostPorts",
        f="spec.hostPID spec.hostIPC spec.hostNetwork",
    ),
    # the training container carries its own: nothing is lost
    _a("pod-security-context-removed", pod={"securityContext": None}),
    # the deprecated annotation is read by no check since 1.19: the missing field is named
    _a(
        "seccomp-annotation-unconfined",
        pod={"securityContext": {"seccompProfile": None}, "__main_security": {"seccompProfile": None}},
        annotations={"seccomp.security.alpha.kubernetes.io/pod": "unconfined"},
        r="seccompProfile_restricted",
        f="spec.containers[0].securityContext.seccompProfile",
    ),
    _a(
        "user-namespace-unmasked-proc",
        pod={"hostUsers": False, "__main_security": {"procMount": "Unmasked"}},
        r="procMount_restricted",
        f="spec.containers[0].securityContext.procMount",
    ),
    _a(
        "unmasked-proc-root",
        pod={
            "hostUsers": False,
            "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
            "__main_security": {"procMount": "Unmasked", "runAsNonRoot": False, "runAsUser": 0},
        },
        r="procMount_restricted",
        f="spec.containers[0].securityContext.procMount",
    ),
    _a(
        "windows-host-process",
        pod={
            "__windows": True,
            "hostNetwork": True,
            "securityContext": {
                "windowsOptions": {"hostProcess": True, "runAsUserName": "NT AUTHORITY\\SYSTEM"}
            },
        },
        b="hostNamespaces hostPorts windowsHostProcess",
        f="spec.securityContext.windowsOptions.hostProcess spec.hostNetwork",
    ),
    _a("windows-plain", pod={"__windows": True}),
)

# -- volumes --------------------------------------------------------------------------------
VOLUME_ATOMS: tuple[Atom, ...] = tuple(
    _a(
        f"host-path-{i}",
        volume={"name": "hostile", "hostPath": {"path": path, **({"type": kind} if kind else {})}},
        b="hostPathVolumes",
        f="spec.volumes[-1].hostPath",
    )
    for i, (path, kind) in enumerate(
        [
            ("/", "Directory"),
            ("/", None),
            ("/var/run/containerd/containerd.sock", "Socket"),
            ("/run/containerd/containerd.sock", None),
            ("/var/run/docker.sock", "Socket"),
            ("/var/run/crio/crio.sock", None),
            ("/var/lib/kubelet", "Directory"),
            ("/var/lib/kubelet/pods", None),
            ("/etc", None),
            ("/etc/kubernetes/pki", None),
            ("/proc", None),
            ("/sys", None),
            ("/dev", None),
            ("/root/.ssh", None),
            ("//tfk/home", None),
            ("/var/log", "DirectoryOrCreate"),
            ("/tmp/tfk-cache", "DirectoryOrCreate"),
            ("/home", None),
            ("/data/datasets", "Directory"),
        ]
    )
) + (
    _a(
        "nfs",
        volume={"name": "hostile", "nfs": {"server": "10.0.0.5", "path": "/exports"}},
        r="restrictedVolumes",
        f="spec.volumes[-1].nfs",
    ),
    _a(
        "iscsi",
        volume={
            "name": "hostile",
            "iscsi": {"targetPortal": "10.0.0.6:3260", "iqn": "iqn.2001-04.com.example:storage", "lun": 0},
        },
        r="restrictedVolumes",
        f="spec.volumes[-1].iscsi",
    ),
    _a(
        "rbd",
        volume={"name": "hostile", "rbd": {"monitors": ["10.0.0.7:6789"], "image": "tfk"}},
        r="restrictedVolumes",
        f="spec.volumes[-1].rbd",
    ),
    _a(
        "cephfs",
        volume={"name": "hostile", "cephfs": {"monitors": ["10.0.0.7:6789"]}},
        r="restrictedVolumes",
        f="spec.volumes[-1].cephfs",
    ),
    _a(
        "flex",
        volume={"name": "hostile", "flexVolume": {"driver": "example.com/root"}},
        r="restrictedVolumes",
        f="spec.volumes[-1].flexVolume",
    ),
    _a(
        "fc",
        volume={"name": "hostile", "fc": {"targetWWNs": ["500a0982991b8dc5"], "lun": 2}},
        r="restrictedVolumes",
        f="spec.volumes[-1].fc",
    ),
    _a(
        "azure-file",
        volume={"name": "hostile", "azureFile": {"secretName": "az", "shareName": "s"}},
        r="restrictedVolumes",
        f="spec.volumes[-1].azureFile",
    ),
    _a(
        "portworx",
        volume={"name": "hostile", "portworxVolume": {"volumeID": "pw1"}},
        r="restrictedVolumes",
        f="spec.volumes[-1].portworxVolume",
    ),
    _a(
        "projected-token",
        volume={"name": "hostile", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
    ),
    _a(
        "projected-token-audience",
        volume={
            "name": "hostile",
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "path": "token",
                            "audience": "vault",
                            "expirationSeconds": 86400,
                        }
                    },
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                ]
            },
        },
    ),
    _a("secret", volume={"name": "hostile", "secret": {"secretName": "other-team-credentials"}}),
    _a("config-map", volume={"name": "hostile", "configMap": {"name": "settings"}}),
    _a("empty-dir-memory", volume={"name": "hostile", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}),
    _a(
        "downward-api",
        volume={
            "name": "hostile",
            "downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]},
        },
    ),
    _a("csi", volume={"name": "hostile", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": True}}),
    _a("image", volume={"name": "hostile", "image": {"reference": "registry.example/data:1"}}),
    _a("pvc", volume={"name": "hostile", "persistentVolumeClaim": {"claimName": "someone-elses-claim"}}),
    _a(
        "ephemeral",
        volume={
            "name": "hostile",
            "ephemeral": {
                "volumeClaimTemplate": {
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
                }
            },
        },
    ),
)

# -- annotations ----------------------------------------------------------------------------
ANNOTATION_ATOMS: tuple[Atom, ...] = (
    _a(
        "apparmor-annotation-unconfined",
        annotations={"container.apparmor.security.beta.kubernetes.io/tensorflow": "unconfined"},
        b="appArmorProfile",
        f="metadata.annotations['container.apparmor.security.beta.kubernetes.io/tensorflow']",
    ),
    _a(
        "apparmor-annotation-runtime-default",
        annotations={"container.apparmor.security.beta.kubernetes.io/tensorflow": "runtime/default"},
    ),
    _a(
        "apparmor-annotation-localhost",
        annotations={"container.apparmor.security.beta.kubernetes.io/tensorflow": "localhost/k8s-tfk"},
    ),
    _a(
        "seccomp-annotation-docker-default",
        annotations={"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"},
    ),
)


@dataclass(frozen=True)
class PodCase:
    """One case: a spec to render, or a final pod template (a template override), and the
    atom it carries.

    :param id: ``<channel>/<atom>``.
    :param spec: the training spec (channels through the spec), else None.
    :param template: the final pod template (the override channel), else None.
    :param atom: the hostile setting.
    :param container: where the atom's container fields land, relative to the template
        (``spec.initContainers[0]``), for container atoms.
    :param role: the role whose pods carry the atom (others must pass).
    """

    id: str
    atom: Atom
    spec: dict[str, Any] | None = None
    template: dict[str, Any] | None = None
    container: str | None = None
    role: str = "worker"
    extra: dict[str, Any] = field(default_factory=dict)

    def expected(self, level: str) -> frozenset[str]:
        """The checks the atom's role's pods break at ``level``."""
        if level == "privileged":
            return frozenset()
        return self.atom.baseline if level == "baseline" else self.atom.restricted

    def expected_fields(self, where: str) -> list[str]:
        """The fields that must be named, with the template's path ``where`` in front."""
        out = []
        for f in self.atom.fields:
            if f.startswith("."):
                assert self.container is not None, self.id
                out.append(f"{where}.{self.container}{f}")
            else:
                out.append(f"{where}.{f}")
        return out


def merged(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes``: mappings merge key by key, ``None`` removes a key, any
    other value (a list too) replaces (a strategic merge of lists without a merge key)."""
    out = copy.deepcopy(dict(base))
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _sidecar(atom: Atom, name: str = "agent") -> dict[str, Any]:
    container = {"name": name, "image": SIDE_IMAGE, "command": ["sleep", "infinity"]}
    container["securityContext"] = merged(HARDENED, atom.security or {})
    container.update(copy.deepcopy(dict(atom.container or {})))
    return container


def _with(base: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    data = _json(base)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return data


def _patch_of(atom: Atom) -> dict[str, Any]:
    """A strategic merge patch of the training container carrying the atom (a null removes)."""
    body: dict[str, Any] = {"name": "tensorflow"}
    if atom.security:
        body["securityContext"] = _json(atom.security)
    body.update(_json(atom.container or {}))
    return {"spec": {"containers": [body]}}


def _pod_patch_of(atom: Atom) -> dict[str, Any]:
    return {"spec": _json(atom.pod)}


#: what the API server refuses on an init container that is not a sidecar (probes, lifecycle)
_SIDECAR_ONLY = {"livenessProbe", "readinessProbe", "startupProbe", "lifecycle"}


def _container_cases() -> Iterator[PodCase]:
    for atom in CONTAINER_ATOMS:
        yield PodCase(
            f"sidecar/{atom.id}",
            atom,
            spec=_with(BASE, "pod.sidecars", [_sidecar(atom)]),
            container="spec.initContainers[0]",
        )
        if not set(atom.container or {}) & _SIDECAR_ONLY:  # an init container that ends has none
            yield PodCase(
                f"init/{atom.id}",
                atom,
                spec=_with(BASE, "pod.init_containers", [_sidecar(atom, "setup")]),
                container="spec.initContainers[0]",
            )
        # a role's sidecar after the cluster's init container: the second init container
        spec = _with(BASE_PS, "worker.pod.sidecars", [_sidecar(atom, "worker-agent")])
        spec["pod"] = {"init_containers": [_sidecar(CONTAINER_ATOMS[0], "fetch")]}
        yield PodCase(f"role-sidecar/{atom.id}", atom, spec=spec, container="spec.initContainers[1]")
        if atom.container and "ports" in atom.container:
            continue  # a patch may not set the training container's ports (the spec refuses it)
        if atom.id != "hardened":
            yield PodCase(
                f"patch/{atom.id}",
                atom,
                spec=_with(BASE, "pod.template_patch", _patch_of(atom)),
                container="spec.containers[0]",
            )
            yield PodCase(
                f"role-patch/{atom.id}",
                atom,
                spec=_with(BASE_PS, "worker.pod.template_patch", _patch_of(atom)),
                container="spec.containers[0]",
            )


def _pod_cases() -> Iterator[PodCase]:
    for atom in POD_ATOMS:
        yield PodCase(f"patch/{atom.id}", atom, spec=_with(BASE, "pod.template_patch", _pod_patch_of(atom)))
        yield PodCase(
            f"role-patch/{atom.id}",
            atom,
            spec=_with(BASE_PS, "worker.pod.template_patch", _pod_patch_of(atom)),
        )
        # with a sidecar that relies on the pod's settings (it sets no runAsNonRoot of its own)
        side = _sidecar(CONTAINER_ATOMS[0])
        side["securityContext"].pop("runAsNonRoot")
        spec = _with(BASE, "pod.template_patch", _pod_patch_of(atom))
        spec["pod"]["sidecars"] = [side]
        extra = _sidecar_relies_on_pod(atom)
        yield PodCase(f"patch+sidecar/{atom.id}", extra, spec=spec)


def _sidecar_relies_on_pod(atom: Atom) -> Atom:
    """The atom's checks when a sidecar without its own runAsNonRoot is in the pod: a pod
    that no longer says runAsNonRoot=true leaves it unguarded."""
    sc = (atom.pod or {}).get("securityContext") or {}
    unguarded = "runAsNonRoot" in sc and sc["runAsNonRoot"] is not True
    user_ns = (atom.pod or {}).get("hostUsers") is False
    if unguarded and not user_ns and "runAsNonRoot" not in atom.restricted_only:
        return Atom(
            atom.id,
            pod=atom.pod,
            baseline=atom.baseline,
            restricted_only=atom.restricted_only | {"runAsNonRoot"},
            fields=(*atom.fields, "spec.initContainers[0].securityContext.runAsNonRoot"),
        )
    return atom


def _volume_cases() -> Iterator[PodCase]:
    for atom in VOLUME_ATOMS:
        yield PodCase(f"volumes/{atom.id}", atom, spec=_with(BASE, "pod.volumes", [_json(atom.volume)]))
        yield PodCase(
            f"role-volumes/{atom.id}", atom, spec=_with(BASE_PS, "worker.pod.volumes", [_json(atom.volume)])
        )


def _annotation_cases() -> Iterator[PodCase]:
    for atom in ANNOTATION_ATOMS:
        yield PodCase(
            f"annotations/{atom.id}", atom, spec=_with(BASE, "pod.annotations", dict(atom.annotations or {}))
        )


def base_template() -> dict[str, Any]:
    """The worker pod template the platform renders for :data:`BASE`."""
    from airflow_tfk.render.manifests import render
    from airflow_tfk.spec.cluster import TFClusterSpec

    (job,) = [m for m in render(TFClusterSpec.from_dict(BASE)) if m["kind"] == "Job"]
    return _json(job["spec"]["template"])


def _override(atom: Atom, template: dict[str, Any]) -> dict[str, Any]:
    """The rendered template edited as a user's ``template_dir`` could print it."""
    t = _json(template)
    spec = t["spec"]
    main = spec["containers"][0]
    if atom.security:
        main["securityContext"] = merged(main["securityContext"], atom.security)
    main.update(_json(atom.container or {}))
    pod = dict(atom.pod or {})
    if pod.pop("__windows", False):
        # a Windows pod carries none of the Linux-only settings
        spec["os"] = {"name": "windows"}
        spec["securityContext"] = {"runAsNonRoot": True}
        main["securityContext"] = {"runAsNonRoot": True}
        spec.pop("shareProcessNamespace", None)
    main_security = pod.pop("__main_security", None)
    if main_security:
        main["securityContext"] = merged(main["securityContext"], main_security)
    t["spec"] = merged(spec, pod)
    if atom.volume:
        t["spec"]["volumes"].append(_json(atom.volume))
    if atom.annotations:
        t["metadata"].setdefault("annotations", {}).update(atom.annotations)
    return t


def _override_cases(template: dict[str, Any]) -> Iterator[PodCase]:
    atoms = (
        [a for a in CONTAINER_ATOMS if a.id != "hardened"]
        + list(POD_ATOMS)
        + list(OVERRIDE_POD_ATOMS)
        + list(VOLUME_ATOMS)
        + list(ANNOTATION_ATOMS)
    )
    for atom in atoms:
        container = "spec.containers[0]" if atom.security or atom.container else None
        yield PodCase(f"override/{atom.id}", atom, template=_override(atom, template), container=container)


def _combined_cases(template: dict[str, Any]) -> Iterator[PodCase]:
    """Several atoms at once: every check of each is named, none hides another."""
    by_id = {
        a.id: a for a in (*CONTAINER_ATOMS, *POD_ATOMS, *OVERRIDE_POD_ATOMS, *VOLUME_ATOMS, *ANNOTATION_ATOMS)
    }
    groups = [
        ("privileged", "host-pid", "host-path-0"),
        ("privileged-root", "host-network", "host-path-2"),
        ("cap-sys-admin", "host-ipc", "nfs"),
        ("seccomp-unconfined", "pod-run-as-root", "apparmor-annotation-unconfined"),
        ("escalation", "sysctl-unsafe", "flex"),
        ("selinux-spc", "pod-apparmor-unconfined", "host-path-6"),
        ("probe-metadata-host", "host-pid", "projected-token"),
        ("drop-nothing", "pod-run-as-non-root-false", "iscsi"),
        ("host-port", "host-everything", "host-path-4"),
        ("run-as-root", "user-namespace-root", "secret"),
    ]
    for ids in groups:
        atoms = [by_id[i] for i in ids]
        t = template
        for atom in atoms:
            t = _override(atom, t)
        combo = Atom(
            "+".join(ids),
            baseline=frozenset().union(*(a.baseline for a in atoms)),
            restricted_only=frozenset().union(*(a.restricted_only for a in atoms)),
            fields=tuple(f for a in atoms for f in a.fields),
        )
        if "user-namespace-root" in ids:
            # in a user namespace, root is allowed: only the container's own uid 0 is named
            combo = Atom(combo.id, baseline=combo.baseline, restricted_only=frozenset(), fields=())
        yield PodCase(f"combined/{combo.id}", combo, template=t, container="spec.containers[0]")


def cases() -> list[PodCase]:
    """The whole corpus, in a fixed order."""
    template = base_template()
    out = [
        *_container_cases(),
        *_pod_cases(),
        *_volume_cases(),
        *_annotation_cases(),
        *_override_cases(template),
        *_combined_cases(template),
    ]
    ids = [c.id for c in out]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    return out


_RENDERED: dict[str, list[dict[str, Any]]] = {}


def manifests(case: PodCase) -> list[dict[str, Any]]:
    """The case's objects: its spec rendered (once per process; callers must not change
    them), or its template as a Pod."""
    if case.template is not None:
        meta = {**case.template.get("metadata", {}), "name": "override"}
        return [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": case.template["spec"]}]
    if case.id not in _RENDERED:
        from airflow_tfk.render.manifests import render
        from airflow_tfk.spec.cluster import TFClusterSpec

        assert case.spec is not None
        _RENDERED[case.id] = render(TFClusterSpec.from_dict(case.spec))
    return _RENDERED[case.id]


def pod_templates(case: PodCase) -> list[tuple[str, str, dict[str, Any]]]:
    """``(role, where, template)`` of every pod the case makes: rendered from its spec (a
    Job or a JobSet's replicated Jobs), or its template; ``where`` is the role's path as
    the policy names it (``worker.template``)."""
    if case.template is not None:
        return [("worker", "worker.template", case.template)]
    out = []
    for doc in manifests(case):
        holders = []
        if doc["kind"] == "Job":
            holders = [doc["spec"]]
        elif doc["kind"] == "JobSet":
            holders = [rj["template"]["spec"] for rj in doc["spec"]["replicatedJobs"]]
        for h in holders:
            role = h["template"]["metadata"]["labels"]["tfk.airflow.apache.org/role"]
            out.append((role, f"{role}.template", h["template"]))
    return out


def resolve_fields(fields: list[str], template: Mapping[str, Any]) -> list[str]:
    """``volumes[-1]`` in an expected field is the template's last volume."""
    last = len((template.get("spec") or {}).get("volumes") or []) - 1
    return [f.replace("volumes[-1]", f"volumes[{last}]") for f in fields]
