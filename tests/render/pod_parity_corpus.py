"""A generated corpus of pod rules and template patches for API parity: each case is a
spec the offline checks (``TFClusterSpec`` + ``render``) judge, and the API server judges
the same way (a dry-run create of the rendered Job and of a pod of its template:
``tests/k8s_integration/test_api_parity.py``).

Each mutation is injected through every way a spec reaches the pod that can carry it: the
cluster's and the role's ``template_patch``, the main container through a patch, sidecars
and init containers, and the pod rules (volumes, topology spread) of the cluster and of the
role. ``refused`` is the field path prefix the refusal must name (None: accepted).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

BASE: dict[str, Any] = {
    "name": "parity",
    "namespace": "ns",
    "mode": "all_reduce",
    "worker": {"replicas": 1},
    "image": "busybox:1",
    "command": ["true"],
}

#: offline refuses these mutations (the case id after its source) on purpose where this
#: cluster admits them: the verdict depends on
#: the cluster's objects (a global default PriorityClass makes ``priority: 0`` wrong)
STRICTER = {
    "priority-zero": "priority depends on the cluster's PriorityClasses: set pod.priority_class",
}


@dataclass(frozen=True)
class Case:
    id: str
    spec: dict[str, Any]
    refused: str | None  # the field the offline refusal names (a prefix), None: accepted
    note: str = field(default="", compare=False)


# -- what is injected ------------------------------------------------------------------
WIN = {"runAsUserName": "x"}

#: pod-level fields of a template patch: (id, spec patch, refused)
POD_FIELDS: list[tuple[str, dict[str, Any], bool]] = [
    ("hostpid", {"hostPID": True}, True),
    ("hostpid-false", {"hostPID": False}, False),
    ("ephemeral", {"ephemeralContainers": [{"name": "debug", "image": "busybox:1"}]}, True),
    ("ephemeral-empty", {"ephemeralContainers": []}, False),
    ("os-windows", {"os": {"name": "windows"}}, True),
    ("os-linux", {"os": {"name": "linux"}}, False),
    ("os-linux-windows-options", {"os": {"name": "linux"}, "securityContext": {"windowsOptions": WIN}}, True),
    ("priority", {"priority": 1000}, True),
    ("priority-negative", {"priority": -5}, True),
    ("priority-zero", {"priority": 0}, True),
    ("overhead", {"overhead": {"cpu": "100m"}}, True),
    ("overhead-memory", {"overhead": {"memory": "10Mi"}}, True),
    ("claims-template", {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-t"}]}, False),
    ("claims-name", {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-c"}]}, False),
    (
        "claims-both",
        {"resourceClaims": [{"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]},
        True,
    ),
    ("claims-none", {"resourceClaims": [{"name": "gpu"}]}, True),
    ("scheduling-gate", {"schedulingGates": [{"name": "example.com/gate"}]}, False),
    ("dns-none", {"dnsPolicy": "None"}, True),
    ("dns-none-empty", {"dnsPolicy": "None", "dnsConfig": {"searches": ["a.example"]}}, True),
    ("dns-none-server", {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.0.0.10"]}}, False),
    (
        "dns-four-servers",
        {"dnsConfig": {"nameservers": ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]}},
        True,
    ),
    ("dns-name-server", {"dnsConfig": {"nameservers": ["dns.example"]}}, True),
    ("dns-extra-server", {"dnsConfig": {"nameservers": ["10.0.0.10"]}}, False),
]

#: the main container's fields through a patch, a sidecar's or an init container's own:
#: (id, container fields, extra pod spec of the patch, refused)
CONTAINER_FIELDS: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("windows-options-linux", {"securityContext": {"windowsOptions": WIN}}, {"os": {"name": "linux"}}, True),
    ("windows-options-no-os", {"securityContext": {"windowsOptions": WIN}}, {}, False),
    ("claim-unknown", {"resources": {"claims": [{"name": "nope"}]}}, {}, True),
    (
        "claim-known",
        {"resources": {"claims": [{"name": "gpu"}]}},
        {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
        False,
    ),
]

#: (id, volumes, volumeDevices of a sidecar, refused)
VOLUME_CASES: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], bool]] = [
    ("device-emptydir", [{"name": "blk", "emptyDir": {}}], [{"name": "blk", "devicePath": "/dev/blk"}], True),
    (
        "device-configmap",
        [{"name": "blk", "configMap": {"name": "c"}}],
        [{"name": "blk", "devicePath": "/dev/blk"}],
        True,
    ),
    (
        "device-secret",
        [{"name": "blk", "secret": {"secretName": "s"}}],
        [{"name": "blk", "devicePath": "/dev/blk"}],
        True,
    ),
    (
        "device-claim",
        [{"name": "blk", "persistentVolumeClaim": {"claimName": "c"}}],
        [{"name": "blk", "devicePath": "/dev/blk"}],
        False,
    ),
    (
        "device-ephemeral",
        [
            {
                "name": "blk",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "volumeMode": "Block",
                            "resources": {"requests": {"storage": "1Gi"}},
                        }
                    }
                },
            }
        ],
        [{"name": "blk", "devicePath": "/dev/blk"}],
        False,
    ),
    (
        "device-no-volume",
        [{"name": "other", "emptyDir": {}}],
        [{"name": "blk", "devicePath": "/dev/blk"}],
        True,
    ),
]

#: topology spread constraints: (id, constraints, refused)
_T = {"topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
SPREAD_CASES: list[tuple[str, list[dict[str, Any]], bool]] = [
    ("skew-0", [{**_T, "maxSkew": 0}], True),
    ("skew-negative", [{**_T, "maxSkew": -1}], True),
    ("skew-1", [{**_T, "maxSkew": 1}], False),
    ("skew-2-anyway", [{**_T, "maxSkew": 2, "whenUnsatisfiable": "ScheduleAnyway"}], False),
    ("when-bad", [{**_T, "maxSkew": 1, "whenUnsatisfiable": "Sometimes"}], True),
    ("min-domains-0", [{**_T, "maxSkew": 1, "minDomains": 0}], True),
    ("min-domains-2", [{**_T, "maxSkew": 1, "minDomains": 2}], False),
    (
        "min-domains-anyway",
        [{**_T, "maxSkew": 1, "minDomains": 2, "whenUnsatisfiable": "ScheduleAnyway"}],
        True,
    ),
    ("duplicate", [{**_T, "maxSkew": 1}, {**_T, "maxSkew": 2}], True),
    ("two-keys", [{**_T, "maxSkew": 1}, {**_T, "maxSkew": 2, "topologyKey": "host"}], False),
]


def _with(path: str, value: Any) -> dict[str, Any]:
    """BASE with ``value`` at the dotted ``path`` (``worker.pod.volumes``)."""
    spec = copy.deepcopy(BASE)
    node = spec
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return spec


def _merge(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    node = spec
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return spec


def cases() -> list[Case]:
    out: list[Case] = []
    patches = {"pod": "pod.template_patch", "role": "worker.pod.template_patch"}
    for name, fields, refused in POD_FIELDS:
        for where, path in patches.items():
            out.append(Case(f"{where}-{name}", _with(path, {"spec": fields}), path if refused else None))
    for name, container, extra, refused in CONTAINER_FIELDS:
        for where, path in patches.items():
            if "resources" not in container:  # the main container's are <role>.resources
                patch = {"spec": {**extra, "containers": [{"name": "tensorflow", **container}]}}
                out.append(Case(f"{where}-main-{name}", _with(path, patch), path if refused else None))
            for kind in ("sidecars", "init_containers"):
                rules = "pod" if where == "pod" else "worker.pod"
                spec = _with(f"{rules}.{kind}", [{"name": "side", "image": "busybox:1", **container}])
                if extra:
                    _merge(spec, path, {"spec": extra})
                out.append(Case(f"{where}-{kind}-{name}", spec, rules if refused else None))
    for rules in ("pod", "worker.pod"):
        where = rules.split(".")[0]
        for name, volumes, devices, refused in VOLUME_CASES:
            for kind in ("sidecars", "init_containers"):
                spec = _with(f"{rules}.volumes", volumes)
                _merge(
                    spec,
                    f"{rules}.{kind}",
                    [{"name": "side", "image": "busybox:1", "volumeDevices": devices}],
                )
                out.append(Case(f"{where}-{kind}-{name}", spec, rules if refused else None))
        for name, constraints, refused in SPREAD_CASES:
            spec = _with(f"{rules}.topology_spread", constraints)
            out.append(Case(f"{where}-spread-{name}", spec, rules if refused else None))
    return out
