"""The platform policy on a spec's own pod settings, without rendering a template.

A DAG file never renders (parse time stays light), yet a training file that asks for a
privileged sidecar, a ``hostPath`` volume or a template patch of the security settings
should be an import error in Airflow's UI, not a refusal on the worker. :func:`check_spec`
checks what the spec itself adds to every role's pods - the template patches, the sidecars
and init containers (with the hardening the pod gives those that set none), the volumes -
in a pod that has the platform template's pod-level hardening (non-root, ``RuntimeDefault``
seccomp, no API token). The training container and whatever a ``template_dir`` changes are
the templates': ``airflow-tfk validate`` and the Kubernetes backend check the rendered pods
(:func:`~airflow_tfk.spec.platform_policy.check_manifests`) before anything is created.

The fields are the spec's: ``worker.pod.sidecars[0].securityContext.privileged``, or
``pod.volumes[1].hostPath`` for the cluster-wide section; each violation once.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_tfk.spec.platform_policy import (
    PlatformPolicy,
    Violation,
    check_pod_template,
    check_template_patch,
)
from airflow_tfk.spec.pods import hardened, role_rules

__all__ = ["ASSUMED_POD_SETTINGS", "check_spec"]

#: the pod-level settings the platform's templates give every training pod
#: (``templates/_macros.yaml.j2``); a template that drops them is caught on the rendered pod
ASSUMED_POD_SETTINGS: Mapping[str, Any] = {
    "automountServiceAccountToken": False,
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
}

_LISTED = re.compile(r"^spec\.(initContainers|volumes)\[(\d+)\](.*)$")


def check_spec(spec: Any, policy: PlatformPolicy) -> list[Violation]:
    """Every violation of ``policy`` in what ``spec`` (a validated
    :class:`~airflow_tfk.spec.cluster.TFClusterSpec`) adds to its pods, once each."""
    # Resource bounds need the training container's limits: the rendered pod's check.
    per_pod = dataclasses.replace(policy, max_pod_cpu=None, max_pod_memory=None)
    out: dict[tuple[str, str], Violation] = {}

    def add(found: Sequence[Violation]) -> None:
        for v in found:
            out.setdefault((v.field, v.rule), v)

    if spec.pod.template_patch:
        add(check_template_patch(spec.pod.template_patch, policy, where="pod.template_patch"))
    for role, role_spec in spec.roles().items():
        if role_spec.pod.template_patch:
            add(
                check_template_patch(role_spec.pod.template_patch, policy, where=f"{role}.pod.template_patch")
            )
        rules = role_rules(spec, role)
        # The pod lists them as the templates do: init containers, then the sidecars
        # (native: init containers that keep running); each named back to its section.
        listed = [("init_containers", c) for c in rules["init_containers"]]
        listed += [("sidecars", c) for c in rules["sidecars"]]
        init = [
            {**hardened(c), "restartPolicy": "Always"} if key == "sidecars" else hardened(c)
            for key, c in listed
        ]
        pod = {
            "spec": {
                **ASSUMED_POD_SETTINGS,
                "containers": [],
                "initContainers": init,
                "volumes": list(rules["volumes"]),
            }
        }
        names = {
            "initContainers": [_owner(spec, role, key, c) for key, c in listed],
            "volumes": [_owner(spec, role, "volumes", v) for v in rules["volumes"]],
        }
        for v in check_pod_template(pod, per_pod):
            m = _LISTED.match(v.field)
            if m is None:
                continue  # a pod-level finding: the assumed settings are the templates'
            field = names[m.group(1)][int(m.group(2))] + m.group(3)
            add([Violation(field, v.rule, v.message)])
    return list(out.values())


def _owner(spec: Any, role: str, key: str, item: Mapping[str, Any]) -> str:
    """The spec field an init container, sidecar or volume of a role's pod came from: the
    role's own section when it has one of that name, else the cluster-wide one."""
    for where, section in ((f"{role}.pod", spec.roles()[role].pod), ("pod", spec.pod)):
        for i, own in enumerate(getattr(section, key)):
            if own.get("name") == item.get("name"):
                return f"{where}.{key}[{i}]"
    return f"pod.{key}"  # not reached: every item comes from one of the two sections
